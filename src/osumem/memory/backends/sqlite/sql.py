"""The SQL the SQLite store runs, in one place (the tables are in ``schema.py``)."""

from __future__ import annotations

#: Columns of a step as :func:`~osumem.memory.backends.sqlite.rows.decode_steps` reads them.
SELECT_STEPS = (
    "SELECT id, pos, role, text, tool_action, arguments, tool_signature, entities, "
    "subgoal, source, cost, embedding FROM steps WHERE ns = ? AND pos >= ? ORDER BY pos"
)
SELECT_BATCH_ENDS = "SELECT end_pos FROM batches WHERE ns = ? AND end_pos > ? ORDER BY end_pos"
INSERT_BATCH = "INSERT INTO batches (ns, end_pos) VALUES (?, ?)"
INSERT_STEP = (
    "INSERT INTO steps (ns, pos, batch, role, text, tool_action, arguments, "
    "tool_signature, entities, subgoal, source, cost, embedding) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
N_STEPS = "SELECT COALESCE(MAX(pos) + 1, 0) FROM steps WHERE ns = ?"
COUNT_ROLE = "SELECT COUNT(*) FROM steps WHERE ns = ? AND pos >= ? AND role = ?"
STEP_IDS = "SELECT id FROM steps ORDER BY id"
NAMESPACES = "SELECT DISTINCT ns FROM steps UNION SELECT ns FROM pending ORDER BY 1"

SELECT_META = "SELECT key, value FROM meta"
INSERT_META = "INSERT INTO meta (key, value) VALUES (?, ?)"
UPDATE_META = "UPDATE meta SET value = ? WHERE key = ?"
TABLES = "SELECT name FROM sqlite_master WHERE type='table'"

SELECT_PENDING = "SELECT messages FROM pending WHERE ns = ?"
UPSERT_PENDING = (
    "INSERT INTO pending (ns, messages) VALUES (?, ?) "
    "ON CONFLICT (ns) DO UPDATE SET messages = excluded.messages"
)
DELETE_PENDING = "DELETE FROM pending WHERE ns = ?"
SELECT_PENDING_WITH_SOURCES = (
    "SELECT p.messages, h.sources FROM pending p "
    "LEFT JOIN held_sources h ON h.ns = p.ns WHERE p.ns = ?"
)
SELECT_PENDING_NO_SOURCES = "SELECT messages, NULL FROM pending WHERE ns = ?"
UPSERT_HELD_SOURCES = (
    "INSERT INTO held_sources (ns, sources) VALUES (?, ?) "
    "ON CONFLICT (ns) DO UPDATE SET sources = excluded.sources"
)
DELETE_HELD_SOURCES = "DELETE FROM held_sources WHERE ns = ?"

HAS_DIGEST = "SELECT 1 FROM digests WHERE ns = ? AND digest = ?"
SELECT_DIGESTS = "SELECT digest, end_pos FROM digests WHERE ns = ? ORDER BY end_pos, digest"
INSERT_DIGEST = "INSERT OR IGNORE INTO digests (ns, digest, end_pos) VALUES (?, ?, ?)"

SELECT_SNAPSHOT = "SELECT steps, config, fingerprint, checksum, payload FROM snapshots WHERE ns = ?"
REPLACE_SNAPSHOT = (
    "INSERT OR REPLACE INTO snapshots (ns, steps, config, fingerprint, checksum, payload) "
    "VALUES (?, ?, ?, ?, ?, ?)"
)

DATA_VERSION = "PRAGMA data_version"


def delete_namespace(table: str) -> str:
    """The statement deleting one namespace's rows of ``table`` (a schema table name)."""
    return f"DELETE FROM {table} WHERE ns = ?"


def select_all(table: str, order: str) -> str:
    """Every row of ``table`` in ``order`` (for the content hash)."""
    return f"SELECT * FROM {table} ORDER BY {order}"
