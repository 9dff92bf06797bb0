"""Looking inside a memory: ``osumem namespaces``, ``osumem show``, ``osumem export``,
``osumem import`` and ``osumem view`` (the viewer page). Each works on a local store
(``--store``) or a running server (``--server``, token from ``OSUMEM_TOKEN``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from osumem.cli._common import (
    budget_option,
    handle_errors,
    json_option,
    method_option,
    namespace_option,
    require_store,
    server_option,
    shown_store,
    store_option,
)

_SERVER_HELP = (
    "A running `osumem serve --transport http` instead of --store (token from OSUMEM_TOKEN)."
)


def _one_of(store: Path | str | None, server: str | None) -> None:
    from osumem.cli.remote import store_or_server

    store_or_server(store, server)


def _open(store: Path | str, **settings: Any) -> Any:
    """A read-only memory on an existing store file."""
    from osumem.memory import Memory

    require_store(store)
    return Memory.open(store, read_only=True, **settings)


def _client(server: str) -> Any:
    from osumem.serve.client import MemoryClient

    return MemoryClient(server)


@click.command("namespaces")
@store_option(default=None, help="Memory store: a SQLite file or a postgresql:// URL.")
@server_option(help=_SERVER_HELP)
@json_option("Print the namespaces as JSON.")
@handle_errors
def namespaces_cmd(store: Path | str | None, server: str | None, as_json: bool) -> None:
    """List the namespaces of a memory with their step and held-message counts."""
    _one_of(store, server)
    if server is not None:
        with _client(server) as client:
            info = client.namespace_info()
    else:
        assert store is not None
        from osumem.memory.contents import namespace_info

        with _open(store) as mem:
            info = namespace_info(mem)
    if as_json:
        click.echo(json.dumps(info, indent=2, ensure_ascii=False))
        return
    if not info:
        click.echo(f"{store or server}: no namespaces", err=True)
        return
    width = max(len(i["namespace"]) for i in info)
    for i in info:
        held = f", {i['held_messages']} held message(s)" if i["held_messages"] else ""
        click.echo(f"{i['namespace']:<{width}}  {i['steps']:>8} steps{held}")


def _one_line(text: str, width: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


@click.command("show")
@store_option(default=None, help="Memory store: a SQLite file or a postgresql:// URL.")
@server_option(help=_SERVER_HELP)
@namespace_option(help="Namespace to show.")
@click.option("--from", "start", type=click.IntRange(min=0), default=None, help="First position.")
@click.option("--to", "stop", type=click.IntRange(min=0), default=None, help="Positions below TO.")
@click.option(
    "--grep",
    default=None,
    metavar="REGEX",
    help="Only steps whose text, tool or entities match (case insensitive).",
)
@click.option("--limit", type=click.IntRange(min=1), default=None, help="At most this many steps.")
@method_option(help="The method whose units (OSUs) are listed (local stores only).")
@json_option("Print the steps as JSON (full texts, entities, units).")
@handle_errors
def show_cmd(
    store: Path | str | None,
    server: str | None,
    namespace: str,
    start: int | None,
    stop: int | None,
    grep: str | None,
    limit: int | None,
    method: str,
    as_json: bool,
) -> None:
    """Print the steps of a namespace: position, role, tool, token cost, units (OSUs) and
    text."""
    _one_of(store, server)
    if server is not None:
        page = _remote_steps(server, namespace, start, stop, grep, limit)
    else:
        assert store is not None
        from osumem.memory.contents import step_records

        with _open(store, method=method) as mem:
            page = step_records(mem, namespace, start=start, stop=stop, grep=grep, limit=limit)
    if as_json:
        click.echo(json.dumps(page, indent=2, ensure_ascii=False))
        return
    for s in page["steps"]:
        units = ",".join(s["osus"]) or "-"
        click.echo(
            f"{s['position']:>6} {s['role']:<9} {s['tool_action'] or '-':<18} {s['cost']:>5}  "
            f"{units}  | {_one_line(s['text'], 160)}"
        )
    more = f"; more from position {page['next']}" if page["next"] is not None else ""
    click.echo(
        f"{len(page['steps'])} of {page['total']} matching steps (namespace {namespace!r}, "
        f"{page['steps_in_namespace']} steps; units of {page['method']}){more}",
        err=True,
    )


def _remote_steps(
    server: str,
    namespace: str,
    start: int | None,
    stop: int | None,
    grep: str | None,
    limit: int | None,
) -> dict[str, Any]:
    """Every page the server returns, up to ``limit`` steps, merged into one."""
    from osumem.serve.client import MAX_STEPS_PAGE

    steps: list[dict[str, Any]] = []
    page: dict[str, Any] = {}
    with _client(server) as client:
        at = start
        while True:
            want = MAX_STEPS_PAGE if limit is None else min(MAX_STEPS_PAGE, limit - len(steps))
            page = client.steps(namespace, start=at, stop=stop, grep=grep, limit=want)
            steps.extend(page["steps"])
            if page["next"] is None or (limit is not None and len(steps) >= limit):
                break
            at = page["next"]
    first_total = page.get("total", 0)
    total = len(steps) + (first_total - len(page["steps"]) if page else 0)
    more = page.get("next") if limit is not None else None
    return {**page, "steps": steps, "total": max(total, len(steps)), "next": more}


@click.command("export")
@store_option(default=None, help="Memory store: a SQLite file or a postgresql:// URL.")
@server_option(help=_SERVER_HELP)
@click.option(
    "--namespace",
    "namespaces",
    multiple=True,
    help="Namespace to export (repeatable; default: every namespace).",
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Output file (default: standard output).",
)
@click.option(
    "--no-embeddings",
    is_flag=True,
    help="Leave the embeddings out (most of the file; import encodes the texts again).",
)
@handle_errors
def export_cmd(
    store: Path | str | None,
    server: str | None,
    namespaces: tuple[str, ...],
    out: Path | None,
    no_embeddings: bool,
) -> None:
    """Export a memory as JSON Lines: every step with its annotations, cost and
    embedding, the add batches, held messages, log digests and the encoder id;
    `osumem import` rebuilds the same memory from it."""
    _one_of(store, server)
    names = list(namespaces) or None
    if server is not None:
        with _client(server) as client:
            lines = client.export_lines(names, embeddings=not no_embeddings)
        if out is None:
            for line in lines:
                click.echo(line)
        else:
            _write_lines(out, lines)
        n = len(lines)
    else:
        assert store is not None
        from osumem.memory.export import write_export

        with _open(store) as mem:
            target: Any = sys.stdout if out is None else out
            n = write_export(mem, target, names, embeddings=not no_embeddings)
    if out is not None:
        click.echo(f"exported {n} lines to {out}", err=True)


def _write_lines(path: Path, lines: list[str]) -> None:
    import os

    from osumem.errors import DataFileError

    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise DataFileError(f"cannot write {path}: {exc.strerror or exc}") from None


@click.command("import")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@store_option(
    default=None, help="Memory store: a SQLite file or a postgresql:// URL (created if missing)."
)
@server_option(help=_SERVER_HELP)
@click.option(
    "--namespace",
    "namespaces",
    multiple=True,
    help="Import only this namespace of the file (repeatable).",
)
@click.option(
    "--replace",
    is_flag=True,
    help="Overwrite a namespace that holds other content (default: refuse).",
)
@json_option("Print the summary as JSON.")
@handle_errors
def import_cmd(
    file: Path,
    store: Path | str | None,
    server: str | None,
    namespaces: tuple[str, ...],
    replace: bool,
    as_json: bool,
) -> None:
    """Import an export made by `osumem export` (all of it in one transaction, or
    nothing). A namespace already held with the same content is left unchanged, so
    importing twice changes nothing."""
    _one_of(store, server)
    if server is not None:
        from osumem.errors import ConfigError, DataFileError

        if namespaces:
            raise ConfigError("--namespace: a server imports the whole file; drop --namespace")
        try:
            text = file.read_text(encoding="utf-8")
        except OSError as exc:
            raise DataFileError(f"export file {file}: cannot read ({exc.strerror})") from None
        with _client(server) as client:
            summary = client.import_lines(text, replace=replace)
        where = server
    else:
        assert store is not None
        summary = _import_local(file, store, list(namespaces) or None, replace)
        where = shown_store(store)
    if as_json:
        click.echo(json.dumps(summary, indent=2, ensure_ascii=False))
        return
    parts = ", ".join(f"{ns} {what}" for ns, what in summary["namespaces"].items())
    click.echo(
        f"imported {file} into {where}: {parts or 'nothing'} ({summary['steps_written']} steps written)"
    )


def _import_local(
    file: Path, store: Path | str, namespaces: list[str] | None, replace: bool
) -> dict[str, Any]:
    from osumem.memory import Memory
    from osumem.memory.export import import_file

    mem = Memory.open(store)
    created = mem.store.created
    try:
        summary = import_file(mem, file, namespaces=namespaces, replace=replace).to_dict()
    except BaseException:
        mem.close()
        if created:
            mem.store.discard()  # a failed first import leaves no file
        raise
    mem.close()
    return summary


@click.command("view")
@store_option(default=None, help="Memory store: a SQLite file or a postgresql:// URL.")
@server_option(help=_SERVER_HELP)
@namespace_option(help="Namespace to show.")
@click.option("--query", default=None, help="Highlight what the memory retrieves for this query.")
@budget_option(help="Token budget of --query.")
@method_option(help="Retrieval method (its units are drawn; local stores only).")
@click.option(
    "--text-chars",
    type=click.IntRange(min=0),
    default=300,
    show_default=True,
    help="Cut step texts at this many characters in the page (0: whole texts).",
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="The HTML file to write (one self-contained file, no network).",
)
@handle_errors
def view_cmd(
    store: Path | str | None,
    server: str | None,
    namespace: str,
    query: str | None,
    budget: int,
    method: str,
    text_chars: int,
    out: Path,
) -> None:
    """Write the viewer page of a namespace: the trajectory as a timeline, its units as
    bands per view (click one to highlight its members) and, with --query, the
    retrieved steps with why each is there and the budget use. `osumem serve` shows
    the same page at /ui."""
    from osumem.memory.contents import answer_for_page, page_data
    from osumem.serve.ui import standalone_page

    _one_of(store, server)
    if server is not None:
        with _client(server) as client:
            data = client.page_data(namespace)
            if query is not None:
                answer = client.retrieve(query, budget, namespace=namespace, explain=True)
                data["query"] = answer_for_page(answer.to_dict(explain=True))
    else:
        assert store is not None
        with _open(store, method=method) as mem:
            data = page_data(mem, namespace, query=query, budget=budget, text_chars=text_chars)
    page = standalone_page(data)
    _write_lines(out, [page.rstrip("\n")])
    size = out.stat().st_size
    click.echo(
        f"wrote {out} ({size / 1e6:.2f} MB, {data['n']} steps, {len(data['units']['key'])} units)",
        err=True,
    )
