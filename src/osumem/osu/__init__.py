"""OSU construction: views, temporal splitting, caps, the OSU pool, and the
statistics the analysis reads (evidence-OSU membership, reachability)."""

from osumem.osu.config import VIEWS, OSUConfig
from osumem.osu.pool import OSUPool

__all__ = ["VIEWS", "OSUConfig", "OSUPool"]
