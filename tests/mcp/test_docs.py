"""docs/mcp.md and the README's MCP section cannot drift from the code: the tools block is what
`tether mcp --list-tools` prints, the client snippet is a command line tether accepts, and the
progress and answer examples are what the code writes."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tether.parent.cli.main import _parser
from tether.parent.cli.mcp import listing
from tether.parent.delegation import builtin_registry

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "mcp.md").read_text()
README = (ROOT / "README.md").read_text()


def snippets(text: str) -> list[str]:
    return re.findall(r"```json\n(\{\n  \"mcpServers\".*?)```", text, re.DOTALL)


def test_the_tools_block_is_what_list_tools_prints() -> None:
    got = re.search(
        r"<!-- mcp-tools:begin -->\n```json\n(.*?)```\n<!-- mcp-tools:end -->", DOC, re.DOTALL
    )
    assert got is not None
    expected = json.dumps(listing(builtin_registry()), indent=2, ensure_ascii=False) + "\n"
    assert got.group(1) == expected, (
        "docs/mcp.md is out of date: replace the mcp-tools block with the output of "
        "`tether mcp --list-tools`"
    )


def test_the_continuable_tools_block_is_what_list_tools_prints_after_task() -> None:
    marker = "mcp-continuable-tools"
    got = re.search(
        rf"<!-- {marker}:begin -->\n```json\n(.*?)```\n<!-- {marker}:end -->", DOC, re.DOTALL
    )
    assert got is not None
    tools = listing(builtin_registry(), continuable=True)["tools"]
    assert [t["name"] for t in tools] == ["task", "send_message", "list_agents"]
    expected = json.dumps({"tools": tools[1:]}, indent=2, ensure_ascii=False) + "\n"
    assert got.group(1) == expected


def test_the_client_snippet_starts_tether_mcp_with_options_it_accepts() -> None:
    [in_readme] = snippets(README)
    [in_doc] = snippets(DOC)
    assert in_readme == in_doc
    server = json.loads(in_readme)["mcpServers"]["tether"]
    assert server["command"] == "tether"
    args = _parser().parse_args(server["args"])
    assert (args.cmd, args.model, args.workspace) == (
        "mcp",
        "openai:gpt-4o-mini",
        "/path/to/project",
    )
    assert set(server["env"]) == {"OPENAI_API_KEY"}


def test_the_progress_example_has_the_form_the_server_writes() -> None:
    block = re.search(r"### Progress\n.*?```\n(.*?)```", DOC, re.DOTALL)
    assert block is not None
    form = (
        r"sa-\d+ \w+ '[^']+': (started \(task, read-only\)|completed|"
        r"(next step|calls \w+|working) \(step \d+, [\d.]+ s, last tool \w+, \d+ tokens\))"
    )
    lines = block.group(1).splitlines()
    assert lines and all(re.fullmatch(form, line) for line in lines), lines


def test_the_readme_and_the_docs_list_link_the_mcp_doc() -> None:
    assert README.count("docs/mcp.md") >= 2
