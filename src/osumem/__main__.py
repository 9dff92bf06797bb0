"""``python -m osumem``: the command line."""

from osumem.cli import main

main()
