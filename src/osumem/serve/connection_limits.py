"""The connection guard's default limits (:mod:`osumem.serve.connections`), apart from
it so that the command line reads them without importing asyncio."""

#: Seconds a connection may take to send a complete request head.
HEADER_TIMEOUT = 10.0
#: Seconds a request body may take to arrive in full, once its head has (then 408).
BODY_TIMEOUT = 30.0
#: Open connections in all.
MAX_CONNECTIONS = 1024
#: Open connections per client address.
MAX_PER_CLIENT = 256
#: uvicorn's HTTP protocols the guard wraps, and ``auto``: httptools' C parser when it
#: is installed (uvicorn's own choice, as with ``uvicorn[standard]``), else h11's.
HTTP_PROTOCOLS = ("auto", "httptools", "h11")
