"""The SQL the Postgres store runs, in one place (the tables are in ``schema.py``;
every name is resolved in the store's schema, first on the connection's search path)."""

from __future__ import annotations

#: Columns of a step as :func:`~osumem.memory.backends.codec.decode_steps` reads them.
SELECT_STEPS = (
    "SELECT s.id, s.pos, s.role, s.text, s.tool_action, s.arguments, s.tool_signature, "
    "s.entities, s.subgoal, s.source, s.cost, s.embedding, m.metadata, m.time, m.updated "
    "FROM steps s LEFT JOIN step_metadata m ON m.id = s.id "
    "WHERE s.ns = %s AND s.pos >= %s AND s.pos < %s ORDER BY s.pos"
)
#: :data:`SELECT_STEPS` of a store read as it is, without the metadata table.
SELECT_STEPS_NO_METADATA = (
    "SELECT id, pos, role, text, tool_action, arguments, tool_signature, entities, "
    "subgoal, source, cost, embedding, NULL::text, NULL::float8, NULL::float8 FROM steps "
    "WHERE ns = %s AND pos >= %s AND pos < %s ORDER BY pos"
)
SELECT_BATCH_ENDS = (
    "SELECT end_pos FROM batches WHERE ns = %s AND end_pos > %s AND end_pos <= %s ORDER BY end_pos"
)
INSERT_BATCH = "INSERT INTO batches (ns, end_pos) VALUES (%s, %s) RETURNING id"
INSERT_STEP = (
    "INSERT INTO steps (ns, pos, batch, role, text, tool_action, arguments, "
    "tool_signature, entities, subgoal, source, cost, embedding) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING id"
)
INSERT_METADATA = "INSERT INTO step_metadata (id, metadata, time, updated) VALUES (%s, %s, %s, %s)"
#: A metadata change: the time the step was added stays.
UPSERT_METADATA = (
    "INSERT INTO step_metadata (id, metadata, time, updated) VALUES (%s, %s, %s, %s) "
    "ON CONFLICT (id) DO UPDATE SET metadata = excluded.metadata, updated = excluded.updated"
)
UPDATED_OF = "SELECT id, updated FROM step_metadata WHERE id = ANY(%s)"
#: A replaced step: its metadata and times are the new row's.
REPLACE_METADATA = (
    "INSERT INTO step_metadata (id, metadata, time, updated) VALUES (%s, %s, %s, %s) "
    "ON CONFLICT (id) DO UPDATE SET metadata = excluded.metadata, time = excluded.time, "
    "updated = excluded.updated"
)
UPDATE_STEP = (
    "UPDATE steps SET role = %s, text = %s, tool_action = %s, arguments = %s, "
    "tool_signature = %s, entities = %s, subgoal = %s, source = %s, cost = %s, "
    "embedding = %s WHERE id = %s"
)
IDS_AT = "SELECT id, pos FROM steps WHERE ns = %s AND pos = ANY(%s) ORDER BY pos"
DELETE_STEPS_AT = "DELETE FROM steps WHERE ns = %s AND pos = ANY(%s)"
#: Deleting steps moves the later ones down in two statements: first past every stored
#: position (``UNIQUE (ns, pos)`` holds row by row), then to their places.
SHIFT_STEPS = "UPDATE steps SET pos = pos + %s WHERE ns = %s AND pos > %s"
SETTLE_STEPS = (
    "UPDATE steps s SET pos = s.pos - %s - (SELECT COUNT(*) FROM unnest(%s::integer[]) d(p) "
    "WHERE d.p < s.pos - %s) WHERE s.ns = %s AND s.pos >= %s"
)
SELECT_BATCHES = "SELECT id, end_pos FROM batches WHERE ns = %s ORDER BY end_pos"
MOVE_BATCH = "UPDATE batches SET end_pos = %s WHERE id = %s"
DELETE_BATCH = "DELETE FROM batches WHERE id = %s"
MOVE_DIGESTS = (
    "UPDATE digests SET end_pos = end_pos - (SELECT COUNT(*) FROM unnest(%s::integer[]) d(p) "
    "WHERE d.p < end_pos) WHERE ns = %s"
)
SNAPSHOT_STEPS = "SELECT steps FROM snapshots WHERE ns = %s"
DELETE_SNAPSHOT = "DELETE FROM snapshots WHERE ns = %s"
SELECT_EDITS = "SELECT edits FROM namespace_edits WHERE ns = %s"
COUNT_EDIT = (
    "INSERT INTO namespace_edits (ns, edits) VALUES (%s, 1) "
    "ON CONFLICT (ns) DO UPDATE SET edits = namespace_edits.edits + 1"
)
N_STEPS = "SELECT COALESCE(MAX(pos) + 1, 0) FROM steps WHERE ns = %s"
COUNT_ROLE = "SELECT COUNT(*) FROM steps WHERE ns = %s AND pos >= %s AND role = %s"
STEP_IDS = "SELECT id FROM steps ORDER BY id"
NAMESPACE_STEP_IDS = "SELECT id FROM steps WHERE ns = %s ORDER BY pos"
#: A namespace's step ids and when each was last changed, in position order.
STEP_VERSIONS = (
    "SELECT s.id, m.updated FROM steps s LEFT JOIN step_metadata m ON m.id = s.id "
    "WHERE s.ns = %s ORDER BY s.pos"
)
STEP_VERSIONS_NO_METADATA = "SELECT id, NULL FROM steps WHERE ns = %s ORDER BY pos"
NAMESPACES = "SELECT DISTINCT ns FROM steps UNION SELECT ns FROM pending ORDER BY 1"

#: The first add records the encoder; a concurrent first add waits for it and then
#: finds the row set (0 rows updated), so the encoders are compared, never overwritten.
CLAIM_META = "UPDATE meta SET value = %s WHERE key = %s AND value IN ('', '0')"

SELECT_PENDING = "SELECT messages FROM pending WHERE ns = %s"
UPSERT_PENDING = (
    "INSERT INTO pending (ns, messages) VALUES (%s, %s) "
    "ON CONFLICT (ns) DO UPDATE SET messages = excluded.messages"
)
DELETE_PENDING = "DELETE FROM pending WHERE ns = %s"
SELECT_PENDING_WITH_SOURCES = (
    "SELECT p.messages, h.sources FROM pending p "
    "LEFT JOIN held_sources h ON h.ns = p.ns WHERE p.ns = %s"
)
UPSERT_HELD_SOURCES = (
    "INSERT INTO held_sources (ns, sources) VALUES (%s, %s) "
    "ON CONFLICT (ns) DO UPDATE SET sources = excluded.sources"
)
DELETE_HELD_SOURCES = "DELETE FROM held_sources WHERE ns = %s"

HAS_DIGEST = "SELECT 1 FROM digests WHERE ns = %s AND digest = %s"


def add_context(digests: bool, held_sources: bool) -> str:
    """One round trip for what an add needs (parameters: the namespace, the digest):
    the sum of the namespace versions (:data:`DATA_VERSION`), whether the digest is
    recorded, the held messages, their sources, the step count; a table the store lacks
    reads as NULL."""
    logged = (
        "(SELECT 1 FROM digests WHERE ns = %(ns)s AND digest = %(digest)s)" if digests else "NULL"
    )
    sources = "(SELECT sources FROM held_sources WHERE ns = %(ns)s)" if held_sources else "NULL"
    return (
        "SELECT (SELECT COALESCE(SUM(version), 0)::bigint FROM versions), "
        f"{logged}, (SELECT messages FROM pending WHERE ns = %(ns)s), {sources}, "
        "(SELECT COALESCE(MAX(pos) + 1, 0) FROM steps WHERE ns = %(ns)s)"
    )


SELECT_DIGESTS = "SELECT digest, end_pos FROM digests WHERE ns = %s ORDER BY end_pos, digest"
INSERT_DIGEST = (
    "INSERT INTO digests (ns, digest, end_pos) VALUES (%s, %s, %s) ON CONFLICT DO NOTHING"
)

SELECT_SNAPSHOT = (
    "SELECT steps, config, fingerprint, checksum, payload FROM snapshots WHERE ns = %s"
)
UPSERT_SNAPSHOT = (
    "INSERT INTO snapshots (ns, steps, config, fingerprint, checksum, payload) "
    "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (ns) DO UPDATE SET steps = excluded.steps, "
    "config = excluded.config, fingerprint = excluded.fingerprint, "
    "checksum = excluded.checksum, payload = excluded.payload"
)
#: The snapshot writer's locks, taken without waiting (a snapshot is a cache).
TRY_STORE_LOCK = "SELECT pg_try_advisory_xact_lock_shared(%s)"
TRY_NAMESPACE_ROW = "SELECT 1 FROM versions WHERE ns = %s FOR UPDATE NOWAIT"

#: The change counter: every write transaction adds one to its namespace's row.
DATA_VERSION = "SELECT COALESCE(SUM(version), 0)::bigint FROM versions"

#: The most similar steps of a namespace below a position, best first, from the HNSW
#: index (``schema.create_vector_index`` makes the function).
NEAREST = "SELECT pos FROM nearest_steps(%s, %s, %s, %s)"


def delete_namespace(table: str) -> str:
    """The statement deleting one namespace's rows of ``table`` (a schema table name)."""
    return f"DELETE FROM {table} WHERE ns = %s"


def select_all(table: str, order: str) -> str:
    """Every row of ``table`` in ``order`` (for the content hash)."""
    return f"SELECT * FROM {table} ORDER BY {order}"
