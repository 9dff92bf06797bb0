"""ToolBench DFS answer trees → OpenAI ``tool_calls`` messages.

A DFS answer file (ToolBench ``data/answer/*_DFS_*.json``, one query each) holds
``answer_generation`` (with ``train_messages``: message lists in the legacy OpenAI
function-calling shape, one per decision, the last the whole chosen path) and ``tree``
(the search tree: nodes with ``node_type`` ``Thought`` / ``Action`` / ``Action Input``,
``description``, ``observation``, ``children``).

Reading order:

1. the last list of ``answer_generation.train_messages`` (the chosen path, with the
   system prompt and the query), converted as legacy function calling
   (:mod:`osumem.ingest.openai_legacy`);
2. without ``train_messages`` (a search with no valid answer recorded there), the
   winning path of ``tree``: the first leaf, depth first, that gave the final answer
   (``observation_code`` 3, or a ``Finish`` call with ``return_type: give_answer``) and
   is not pruned. Along it a ``Thought`` is the assistant's text, an ``Action`` then its
   ``Action Input`` are one function call, and the input's ``observation`` its result.
   The query (``answer_generation.query`` or ``query``) is the user message.

3. without a winning leaf (the search failed), the deepest
   explored path: the longest root-to-leaf path, pruned branches included, the first
   in depth-first order among equally long ones. A failed trajectory is still memory
   (what was tried, what the tools answered); the other branches are not read, and the
   normalized log reports it as a skip (:data:`DEEPEST_PATH_NOTE`).

A tree that explored nothing is an error.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from osumem.ingest.openai_chat import LogFormatError
from osumem.ingest.openai_legacy import legacy_to_openai

#: ``observation_code`` of a node that gave the final answer in ToolBench's DFS.
FINAL_ANSWER_CODE = 3
#: The skip reason of a tree read along its deepest explored path.
DEEPEST_PATH_NOTE = (
    "tree without a winning path: its deepest explored path was read, the other branches were not"
)


def is_dfs_record(obj: Any) -> bool:
    """True when ``obj`` has the shape of a ToolBench DFS answer file."""
    return isinstance(obj, Mapping) and (
        isinstance(obj.get("answer_generation"), Mapping)
        or (isinstance(obj.get("tree"), Mapping) and "compare_candidates" in obj)
    )


def _is_winning_leaf(node: Mapping[str, Any], parent_action: str) -> bool:
    if node.get("pruned") or node.get("children"):
        return False
    if node.get("observation_code") == FINAL_ANSWER_CODE:
        return True
    if parent_action.lower() != "finish":
        return False
    try:
        args = json.loads(str(node.get("description", "")))
    except json.JSONDecodeError:
        return False
    return isinstance(args, Mapping) and args.get("return_type") == "give_answer"


def winning_path(tree: Mapping[str, Any], where: str) -> list[Mapping[str, Any]] | None:
    """Nodes from the root's first child to the first winning leaf (depth first,
    children in order); ``None`` when no leaf gave the final answer."""
    root = tree.get("tree", tree)
    if not isinstance(root, Mapping):
        raise LogFormatError(f"{where}.tree: expected a tree node object")
    # iterative DFS: (node, path to it, the description of the nearest Action above)
    stack: list[tuple[Mapping[str, Any], list[Mapping[str, Any]], str]] = [(root, [], "")]
    while stack:
        node, path, action = stack.pop()
        children = node.get("children") or []
        if not isinstance(children, list):
            raise LogFormatError(f"{where}.tree: 'children' must be a list")
        if path and _is_winning_leaf(node, action):
            return path
        for child in reversed(children):
            if not isinstance(child, Mapping):
                raise LogFormatError(f"{where}.tree: a child node is not an object")
            child_action = (
                str(child.get("description", "")) if child.get("node_type") == "Action" else action
            )
            stack.append((child, [*path, child], child_action))
    return None


def deepest_path(tree: Mapping[str, Any], where: str) -> list[Mapping[str, Any]]:
    """Nodes from the root's first child to the deepest leaf (the first in depth-first
    order among equally deep ones); empty when the root has no children."""
    root = tree.get("tree", tree)
    if not isinstance(root, Mapping):
        raise LogFormatError(f"{where}.tree: expected a tree node object")
    best: list[Mapping[str, Any]] = []
    stack: list[tuple[Mapping[str, Any], list[Mapping[str, Any]]]] = [(root, [])]
    while stack:
        node, path = stack.pop()
        children = node.get("children") or []
        if not isinstance(children, list):
            raise LogFormatError(f"{where}.tree: 'children' must be a list")
        if not children and len(path) > len(best):
            best = path
        for child in reversed(children):
            if not isinstance(child, Mapping):
                raise LogFormatError(f"{where}.tree: a child node is not an object")
            stack.append((child, [*path, child]))
    return best


def _path_to_legacy(
    path: list[Mapping[str, Any]], query: str | None, where: str
) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    if query:
        messages.append({"role": "user", "content": query})
    thought: str | None = None
    action: str | None = None
    for node in path:
        kind = node.get("node_type")
        text = node.get("description", "")
        if not isinstance(text, str):
            raise LogFormatError(f"{where}.tree: node 'description' must be a string")
        if kind == "Thought":
            thought = text if thought is None else f"{thought}\n{text}"
        elif kind == "Action":
            action = text
        elif kind == "Action Input":
            if not action:
                raise LogFormatError(f"{where}.tree: 'Action Input' node without an Action above")
            messages.append(
                {
                    "role": "assistant",
                    "content": thought,
                    "function_call": {"name": action, "arguments": text or "{}"},
                }
            )
            if "observation" in node:
                messages.append(
                    {"role": "function", "name": action, "content": str(node["observation"])}
                )
            thought, action = None, None
        else:
            raise LogFormatError(f"{where}.tree: unknown node_type {kind!r}")
    if thought:
        messages.append({"role": "assistant", "content": thought})
    return messages


def dfs_to_openai(record: Mapping[str, Any], *, where: str = "record") -> list[dict[str, Any]]:
    """The chosen path of a ToolBench DFS answer record as OpenAI messages (see the
    module doc; :func:`read_dfs` also says which path was read)."""
    return read_dfs(record, where=where)[0]


def read_dfs(
    record: Mapping[str, Any], *, where: str = "record"
) -> tuple[list[dict[str, Any]], str | None]:
    """``(messages, note)``: the chosen path of a DFS answer record as OpenAI messages,
    and :data:`DEEPEST_PATH_NOTE` when the tree had no winning path (``None`` else).

    Raises:
        LogFormatError: naming the record, when ``train_messages`` is malformed, or it
            is absent and there is no tree or the tree explored nothing.
    """
    gen = record.get("answer_generation")
    gen = gen if isinstance(gen, Mapping) else {}
    train = gen.get("train_messages")
    if train:
        if not isinstance(train, list) or not all(isinstance(t, list) for t in train):
            raise LogFormatError(
                f"{where}.answer_generation.train_messages: expected a list of message lists"
            )
        k = len(train) - 1
        where_k = f"{where}.answer_generation.train_messages[{k}]"
        return legacy_to_openai(train[k], where=where_k), None
    tree = record.get("tree")
    if not isinstance(tree, Mapping):
        raise LogFormatError(
            f"{where}: no answer_generation.train_messages and no 'tree' to read a path from"
        )
    path = winning_path(tree, where)
    note = None
    if path is None:
        path, note = deepest_path(tree, where), DEEPEST_PATH_NOTE
        if not path:
            raise LogFormatError(
                f"{where}: no answer_generation.train_messages and a tree that explored "
                "nothing (no node below the root)"
            )
    query = gen.get("query", record.get("query"))
    messages = _path_to_legacy(path, query if isinstance(query, str) else None, where)
    return legacy_to_openai(messages, where=f"{where}.tree path"), note
