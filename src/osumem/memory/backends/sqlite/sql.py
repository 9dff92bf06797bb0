"""The SQL the SQLite store runs, in one place (the tables are in ``schema.py``)."""

from __future__ import annotations

#: Columns of a step as :func:`~osumem.memory.backends.sqlite.rows.decode_steps` reads them.
SELECT_STEPS = (
    "SELECT s.id, s.pos, s.role, s.text, s.tool_action, s.arguments, s.tool_signature, "
    "s.entities, s.subgoal, s.source, s.cost, s.embedding, m.metadata, m.time, m.updated "
    "FROM steps s LEFT JOIN step_metadata m ON m.id = s.id "
    "WHERE s.ns = ? AND s.pos >= ? AND s.pos < ? ORDER BY s.pos"
)
#: :data:`SELECT_STEPS` of a store read as it is, without the metadata table.
SELECT_STEPS_NO_METADATA = (
    "SELECT id, pos, role, text, tool_action, arguments, tool_signature, entities, "
    "subgoal, source, cost, embedding, NULL, NULL, NULL FROM steps "
    "WHERE ns = ? AND pos >= ? AND pos < ? ORDER BY pos"
)
SELECT_BATCH_ENDS = (
    "SELECT end_pos FROM batches WHERE ns = ? AND end_pos > ? AND end_pos <= ? ORDER BY end_pos"
)
INSERT_BATCH = "INSERT INTO batches (ns, end_pos) VALUES (?, ?)"
INSERT_STEP = (
    "INSERT INTO steps (id, ns, pos, batch, role, text, tool_action, arguments, "
    "tool_signature, entities, subgoal, source, cost, embedding) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
INSERT_METADATA = "INSERT INTO step_metadata (id, metadata, time, updated) VALUES (?, ?, ?, ?)"
UPSERT_METADATA = (
    "INSERT INTO step_metadata (id, metadata, time, updated) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (id) DO UPDATE SET metadata = excluded.metadata, updated = excluded.updated"
)
UPDATE_STEP = (
    "UPDATE steps SET role = ?, text = ?, tool_action = ?, arguments = ?, tool_signature = ?, "
    "entities = ?, subgoal = ?, source = ?, cost = ?, embedding = ? WHERE id = ?"
)
REPLACE_METADATA = (
    "INSERT OR REPLACE INTO step_metadata (id, metadata, time, updated) VALUES (?, ?, ?, ?)"
)
MAX_STEP_ID = "SELECT COALESCE(MAX(id), 0) FROM steps"
#: The id of the next step: past every stored id and every id given out before (a
#: deleted step's id is never given again; the meta row keeps the largest, a value
#: that is not a whole number counting as 0). Parameter: :data:`RETIRED_ID_KEY`.
NEXT_STEP_ID = (
    "SELECT MAX(COALESCE((SELECT MAX(id) FROM steps), 0), COALESCE((SELECT CASE "
    "WHEN value <> '' AND value NOT GLOB '*[^0-9]*' THEN CAST(value AS INTEGER) END "
    "FROM meta WHERE key = ?), 0)) + 1"
)
STEP_AT = "SELECT id FROM steps WHERE ns = ? AND pos = ?"
IDS_FROM = "SELECT id, pos FROM steps WHERE ns = ? AND pos >= ? ORDER BY pos"
#: The steps strictly between two positions move down by a count (up when negative).
MOVE_RUN = "UPDATE steps SET pos = pos - ? WHERE ns = ? AND pos > ? AND pos < ?"
DELETE_STEP = "DELETE FROM steps WHERE id = ?"
SELECT_BATCHES = "SELECT id, end_pos FROM batches WHERE ns = ? ORDER BY end_pos"
MOVE_BATCH = "UPDATE batches SET end_pos = ? WHERE id = ?"
DELETE_BATCH = "DELETE FROM batches WHERE id = ?"
SELECT_DIGEST_ENDS = "SELECT digest, end_pos FROM digests WHERE ns = ?"
MOVE_DIGEST = "UPDATE digests SET end_pos = ? WHERE ns = ? AND digest = ?"
SNAPSHOT_STEPS = "SELECT steps FROM snapshots WHERE ns = ?"
DELETE_SNAPSHOT = "DELETE FROM snapshots WHERE ns = ?"
SELECT_EDITS = "SELECT edits FROM namespace_edits WHERE ns = ?"
COUNT_EDIT = (
    "INSERT INTO namespace_edits (ns, edits) VALUES (?, 1) "
    "ON CONFLICT (ns) DO UPDATE SET edits = edits + 1"
)
#: The meta row keeping the largest step id ever given out (ids are never reused).
RETIRED_ID_KEY = "max_step_id"
UPSERT_META = (
    "INSERT INTO meta (key, value) VALUES (?, ?) "
    "ON CONFLICT (key) DO UPDATE SET value = excluded.value"
)
N_STEPS = "SELECT COALESCE(MAX(pos) + 1, 0) FROM steps WHERE ns = ?"
COUNT_ROLE = "SELECT COUNT(*) FROM steps WHERE ns = ? AND pos >= ? AND role = ?"
STEP_IDS = "SELECT id FROM steps ORDER BY id"
NAMESPACE_STEP_IDS = "SELECT id FROM steps WHERE ns = ? ORDER BY pos"
#: A namespace's step ids and when each was last changed, in position order.
STEP_VERSIONS = (
    "SELECT s.id, m.updated FROM steps s LEFT JOIN step_metadata m ON m.id = s.id "
    "WHERE s.ns = ? ORDER BY s.pos"
)
STEP_VERSIONS_NO_METADATA = "SELECT id, NULL FROM steps WHERE ns = ? ORDER BY pos"
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


def add_context(digests: bool, held_sources: bool) -> str:
    """One read of what an add needs (``?1`` the namespace, ``?2`` the digest):
    ``data_version``, whether the digest is recorded, the held messages, their sources,
    the step count; a table the file lacks reads as NULL."""
    logged = "(SELECT 1 FROM digests WHERE ns = ?1 AND digest = ?2)" if digests else "NULL"
    sources = "(SELECT sources FROM held_sources WHERE ns = ?1)" if held_sources else "NULL"
    return (
        "SELECT (SELECT data_version FROM pragma_data_version()), "
        f"{logged}, (SELECT messages FROM pending WHERE ns = ?1), {sources}, "
        "(SELECT COALESCE(MAX(pos) + 1, 0) FROM steps WHERE ns = ?1)"
    )


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
