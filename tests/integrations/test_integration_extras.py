"""Each framework adapter names the extra it needs when its framework is missing, and
importing ``osumem.integrations`` loads no framework."""

from __future__ import annotations

import subprocess
import sys

import pytest

CASES = {
    "langgraph": ("langgraph", "osumem[langgraph]"),
    "openai_agents": ("agents", "osumem[openai-agents]"),
    "langchain": ("langchain_core", "osumem[langchain]"),
    "llamaindex": ("llama_index", "osumem[llamaindex]"),
}


@pytest.mark.parametrize("module", sorted(CASES))
def test_a_missing_framework_names_its_extra(module):
    blocked, extra = CASES[module]
    code = (
        "import sys\n"
        f"sys.modules[{blocked!r}] = None\n"  # the framework cannot be imported
        "from osumem.errors import MissingExtraError\n"
        "try:\n"
        f"    import osumem.integrations.{module}\n"
        "except MissingExtraError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert f"pip install '{extra}'" in out.stdout, out.stderr


def test_the_package_loads_no_framework():
    code = (
        "import sys, osumem.integrations\n"
        "print(sorted(m for m in ('langgraph', 'agents', 'langchain_core', 'llama_index') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
