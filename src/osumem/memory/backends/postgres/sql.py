"""The SQL the Postgres store runs, in one place (the tables are in ``schema.py``;
every name is resolved in the store's schema, first on the connection's search path)."""

from __future__ import annotations

#: Columns of a step as :func:`~osumem.memory.backends.sqlite.rows.decode_steps` reads them.
SELECT_STEPS = (
    "SELECT id, pos, role, text, tool_action, arguments, tool_signature, entities, "
    "subgoal, source, cost, embedding FROM steps WHERE ns = %s AND pos >= %s ORDER BY pos"
)
SELECT_BATCH_ENDS = "SELECT end_pos FROM batches WHERE ns = %s AND end_pos > %s ORDER BY end_pos"
INSERT_BATCH = "INSERT INTO batches (ns, end_pos) VALUES (%s, %s) RETURNING id"
INSERT_STEP = (
    "INSERT INTO steps (ns, pos, batch, role, text, tool_action, arguments, "
    "tool_signature, entities, subgoal, source, cost, embedding) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING id"
)
N_STEPS = "SELECT COALESCE(MAX(pos) + 1, 0) FROM steps WHERE ns = %s"
COUNT_ROLE = "SELECT COUNT(*) FROM steps WHERE ns = %s AND pos >= %s AND role = %s"
STEP_IDS = "SELECT id FROM steps ORDER BY id"
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
