"""Figures, targets and the Markdown report (docs/performance.md) built from them."""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import platform
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

NOTES = Path(__file__).resolve().parent / "notes.md"
HISTORY = "# History"
"""The notes' heading past which nothing goes into the report (the earlier rounds)."""
X = "\u00d7"
"""The multiplication sign of ratios."""


@dataclass
class Figure:
    key: str
    """`floor.*` (no tether), `tether.*` (what the targets are about) or `context.*`."""
    title: str
    unit: str
    samples: list[float]
    timed: str
    """Exactly what one sample is: from which instant to which."""
    floor: str | None = None
    """Key of the figure this one is compared with (measured interleaved with it)."""
    note: str = ""

    @property
    def n(self) -> int:
        return len(self.samples)

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def spread(self) -> float:
        """Upper over lower quartile: how steady the samples were (1.0 is perfectly steady)."""
        if len(self.samples) < 4:
            return 1.0
        q1, _, q3 = statistics.quantiles(self.samples, n=4)
        return q3 / q1 if q1 > 0 else float("inf")


@dataclass
class Results:
    quick: bool
    figures: dict[str, Figure] = field(default_factory=dict)

    def add(self, fig: Figure) -> None:
        self.figures[fig.key] = fig
        print(f"  {fig.title}: median {fmt(fig.median, fig.unit)} (n={fig.n})", flush=True)


def fmt(value: float, unit: str) -> str:
    if unit == "events/s" or abs(value) >= 100:
        return f"{value:,.0f} {unit}"
    if abs(value) >= 10:
        return f"{value:.1f} {unit}"
    return f"{value:.2f} {unit}"


# --- targets ------------------------------------------------------------------------------------

Check = Callable[[dict[str, Figure]], tuple[bool, str, str]]
"""(met, what was measured, the ratio) from the figures."""


@dataclass(frozen=True)
class Target:
    key: str
    text: str
    check: Check


UNSTEADY = 2.0
"""A figure whose upper quartile is this many times its lower one was measured on a machine
too busy to trust a ratio to it; the target row says so."""


def _relative(
    key: str, floor: str, limit: float, at_most: bool, bound: tuple[str, str] | None = None
) -> Check:
    """`bound`: (a figure's key, what it is): what tether cannot do without (the libraries it
    imports, the child's own exit, the line's encode and decode), read against the same floor
    and shown beside the ratio, so a missed target says when the limit lies below what that
    alone costs."""

    def check(figs: dict[str, Figure]) -> tuple[bool, str, str]:
        a, b = figs[key], figs[floor]
        ratio = a.median / b.median
        met = ratio <= limit if at_most else ratio >= limit
        measured = f"{fmt(a.median, a.unit)} vs {fmt(b.median, b.unit)}"
        if bound is not None and bound[0] in figs:
            c = figs[bound[0]]
            measured += f"; {bound[1]} alone: {fmt(c.median, c.unit)}, {c.median / b.median:.2f}{X}"
        unsteady = [f for f in (a, b) if f.spread > UNSTEADY]
        if unsteady:
            measured += (
                " (unsteady: "
                + ", ".join(
                    f"{'floor' if f is b else 'tether'} q3/q1 = {f.spread:.1f}" for f in unsteady
                )
                + "; rerun on a quieter machine)"
            )
        return met, measured, f"{_ratio(ratio, limit)}{X}"

    return check


def _over_bound(key: str, bound: str, limit: float, at_most: bool, beside: str) -> Check:
    """A target stated as tether's share over what it cannot do without (`bound`: the
    libraries it imports, the child's own exit, the line's encode and decode), measured in the
    same run; `beside` (a figure's key) is what that bound itself is compared with, printed
    beside it, so the row shows both how far the bound is from the bare floor and how much
    tether adds on top of it."""
    relative = _relative(key, bound, limit, at_most)

    def check(figs: dict[str, Figure]) -> tuple[bool, str, str]:
        met, measured, ratio = relative(figs)
        b, f = figs[bound], figs[beside]
        head, sep, tail = measured.partition(" (unsteady")
        measured = (
            f"{head} ({b.title}); that bound itself: {b.median / f.median:.2f}{X} "
            f"{f.title} ({fmt(f.median, f.unit)})" + sep + tail
        )
        return met, measured, ratio

    return check


def _ratio(ratio: float, limit: float) -> str:
    """Two decimals, or as many as it takes to tell the ratio from the limit it is judged
    against (1.3004 is missed against 1.3: "1.30" would read as met)."""
    for places in range(2, 6):
        text = f"{ratio:.{places}f}"
        if float(text) != limit or ratio == limit:
            return text
    return text


def _added(key: str, floor: str, limit: float) -> Check:
    """`key`'s median exceeds `floor`'s by at most `limit` (in their unit)."""

    def check(figs: dict[str, Figure]) -> tuple[bool, str, str]:
        a, b = figs[key], figs[floor]
        added = a.median - b.median
        measured = f"{fmt(a.median, a.unit)} vs {fmt(b.median, b.unit)}: {fmt(added, a.unit)} added"
        unsteady = [f for f in (a, b) if f.spread > UNSTEADY]
        if unsteady:
            measured += " (unsteady; rerun on a quieter machine)"
        return added <= limit, measured, f"{added / limit:.2f}{X} the limit"

    return check


def _absolute(key: str, limit: float, at_most: bool, bound: tuple[str, str] | None = None) -> Check:
    """`bound`: as for `_relative`, a figure of what no implementation can do without, shown
    beside the measurement (and its share of the limit)."""

    def check(figs: dict[str, Figure]) -> tuple[bool, str, str]:
        a = figs[key]
        met = a.median <= limit if at_most else a.median >= limit
        measured = fmt(a.median, a.unit)
        if bound is not None and bound[0] in figs:
            c = figs[bound[0]]
            measured += f"; {bound[1]} alone: {fmt(c.median, c.unit)}, {c.median / limit:.2f}{X}"
        return met, measured, f"{a.median / limit:.2f}{X} the limit"

    return check


TARGETS = [
    Target(
        "ping",
        f"`ping` ≤ 1.3{X} the asyncio-both-ends ping-pong",
        _relative("tether.ping", "floor.pingpong_asyncio", 1.3, True),
    ),
    Target(
        "model_complete",
        f"`model/complete` ≤ 1.2{X} the asyncio-both-ends ping-pong",
        _relative("tether.model_complete", "floor.pingpong_asyncio", 1.2, True),
    ),
    Target(
        "agent_run",
        f"`agent/run` of a tiny agent ≤ 1.3{X} a `ping` to the same child",
        _relative("tether.agent_run", "context.ping_tiny", 1.3, True),
    ),
    Target(
        "follow_up",
        f"a follow-up to a live run ≤ 1.0{X} an ACP SDK `session/prompt` round trip",
        _relative("tether.follow_up_message", "floor.acp_prompt", 1.0, True),
    ),
    Target(
        "fanout",
        f"32 task calls in one turn ≤ 1.25{X} 32 bare runs of the same sub-agents started together",
        _relative("tether.fanout", "context.fanout_bare", 1.25, True),
    ),
    Target(
        "transfer_p2c",
        "1 MiB parent → child ≥ 60% of raw pipe throughput",
        _relative("tether.transfer_p2c", "floor.transfer_p2c", 0.6, False),
    ),
    Target(
        "transfer_c2p",
        f"1 MiB child → parent ≥ 0.9{X} the raw pipe plus the line's encode and decode",
        _over_bound(
            "tether.transfer_c2p",
            "context.transfer_c2p_codec",
            0.9,
            False,
            beside="floor.transfer_c2p",
        ),
    ),
    Target(
        "events",
        "≥ 100,000 `agent/event` per second from one child",
        _absolute("tether.events", 100_000, False),
    ),
    Target(
        "dispose_polite",
        f"polite dispose ≤ 5{X} a bare child's exit on EOF",
        _relative("tether.dispose_polite", "floor.eof_exit", 5.0, True),
    ),
    Target(
        "dispose_stubborn",
        "stubborn dispose ≤ grace + 50 ms",
        _absolute("tether.dispose_stubborn", 50.0, True),
    ),
    Target(
        "dispose_stubborn_default",
        "stubborn dispose with the default graces < 4 s (MCP's and ACP's stdio clients: 4.0 s)",
        _absolute("tether.dispose_stubborn_default", 4.0, True),
    ),
    Target(
        "zygote_spawn",
        f"zygote spawn → ready ≤ 1.3{X} the spawn-first-line floor",
        _relative("tether.zygote_spawn_ready", "floor.spawn_line", 1.3, True),
    ),
    Target(
        "zygote_run",
        f"one whole run through the zygote ≤ 1.15{X} its spawn → ready and its exit",
        _over_bound(
            "context.run_one_zygote",
            "context.zygote_spawn_exit",
            1.15,
            True,
            beside="tether.zygote_spawn_ready",
        ),
    ),
    Target(
        "trace",
        f"a representative run traced ≤ 1.05{X} the same run untraced",
        _relative("tether.trace_run", "context.trace_untraced", 1.05, True),
    ),
    Target(
        "fleet_ready",
        "256 live children through the zygote: all ready ≤ 5 s",
        _absolute("tether.fleet_ready", 5.0, True),
    ),
    Target(
        "fleet_ping",
        "256 live children: `ping` p99 across them ≤ 5 ms",
        _absolute("tether.fleet_ping_p99", 5.0, True),
    ),
    Target(
        "broker",
        f"256 children asking for model turns at once: p99 ≤ 2{X} the `ping` p99 across them",
        _relative("tether.broker_p99", "context.load_ping_p99", 2.0, True),
    ),
    Target(
        "fleet_uss",
        "256 live children: USS ≤ 8 MiB per child",
        _absolute("tether.fleet_uss", 8.0, True),
    ),
    Target(
        "fleet_dispose",
        "256 live children: dispose all ≤ 2 s, 0 survivors",
        _absolute("tether.fleet_dispose", 2.0, True),
    ),
    Target(
        "crash",
        "crash → result ≤ 2 ms (a child with no grandchildren)",
        _absolute(
            "tether.crash_result",
            2.0,
            True,
            bound=("context.crash_exit_same", "the same child's own death, without tether"),
        ),
    ),
    Target(
        "pool_acquire",
        "warm pool: acquire → ready ≤ 1 ms",
        _absolute("tether.pool_acquire", 1000.0, True),
    ),
    Target(
        "spawn_ready",
        f"cold exec spawn → ready ≤ 1.1{X} a child that only imports the libraries",
        _over_bound(
            "tether.spawn_ready",
            "context.libs_spawn_line",
            1.1,
            True,
            beside="floor.spawn_line",
        ),
    ),
    Target(
        "rss",
        f"idle cold child RSS ≤ 1.2{X} a child that only imports the libraries",
        _over_bound(
            "tether.rss",
            "context.asyncio.rss",
            1.2,
            True,
            beside="floor.rss_bare",
        ),
    ),
    Target(
        "ray_run",
        f"a brokered run on another Ray node ≤ 2{X} the same run local (both through a zygote)",
        _relative("tether.ray_run", "context.ray_local_run", 2.0, True),
    ),
    Target(
        "gateway",
        "a foreign agent's model call through the gateway adds ≤ 1 ms to the same call direct",
        _added("tether.gateway_call", "floor.direct_model_call", 1000.0),
    ),
    Target(
        "egress_request",
        "a run's egress proxy adds ≤ 1 ms to a request",
        _added("tether.egress_request", "floor.direct_request", 1000.0),
    ),
    Target(
        "egress_download",
        f"a 64 MiB download through the egress proxy ≥ 0.8{X} a direct loopback download",
        _relative(
            "tether.egress_download",
            "floor.direct_download",
            0.8,
            False,
            bound=("context.bare_relay_download", "a bare relay process"),
        ),
    ),
]


# --- rendering ----------------------------------------------------------------------------------


SOAK_HEADING = "## Soak"
"""The section of docs/performance.md that `scripts/soak` writes and `scripts/bench` keeps."""


def section(text: str, heading: str) -> str | None:
    """The section of a markdown `text` under `heading` (a `## ` line), up to the next `## `
    heading, heading included; `None` when there is none."""
    lines = text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if line.rstrip() == heading:
            end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("## ")), None)
            return "".join(lines[i:end]).rstrip() + "\n"
    return None


def with_section(text: str, heading: str, body: str) -> str:
    """`text` with the section under `heading` replaced by `body` (which starts with the
    heading); a new section goes before `## Analysis`, or at the end."""
    body = body.rstrip() + "\n"
    old = section(text, heading)
    if old is not None:
        start = text.index(old.rstrip())
        rest = text[start + len(old.rstrip()) :].lstrip("\n")
        return text[:start] + body + ("\n" + rest if rest else "")
    marker = "\n## Analysis"
    if marker in text:
        at = text.index(marker) + 1
        return text[:at] + body + "\n" + text[at:]
    return (text.rstrip() + "\n\n" if text.strip() else "") + body


def machine() -> dict[str, str]:
    cpu = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    from tether.parent.process.host import host

    return {
        "CPU": f"{cpu}, {os.cpu_count()} logical CPUs",
        "kernel": f"{platform.system()} {platform.release()}",
        "Python": f"{platform.python_implementation()} {platform.python_version()}",
        "packages": ", ".join(
            f"{name} {_version(name)}" for name in ("anyio", "msgspec", "psutil", "jsonrpcserver")
        ),
        "containment tier": host().tier,
        "cgroup2 mount": _cgroup2_mount(),
    }


def _cgroup2_mount() -> str:
    from tether.parent.process.cgroup_join import cgroup2_mount

    got = cgroup2_mount()
    if got is None:
        return "none"
    where, options = got
    favoured = "favordynmods" in options
    return f"{where} ({'with' if favoured else 'without'} favordynmods)"


def _version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "?"


def _row(fig: Figure, figs: dict[str, Figure]) -> str:
    cells = [
        fig.title,
        fmt(fig.median, fig.unit),
        fmt(min(fig.samples), fig.unit),
        fmt(max(fig.samples), fig.unit),
        str(fig.n),
    ]
    if fig.floor is not None:
        floor = figs[fig.floor]
        cells += [fmt(floor.median, floor.unit), f"{fig.median / floor.median:.2f}{X}"]
    else:
        cells += ["", ""]
    return "| " + " | ".join(cells) + " |"


def notes() -> dict[str, str]:
    """Sections of benchmarks/notes.md by heading, `## key` → its text, up to `HISTORY`."""
    sections: dict[str, str] = {}
    if not NOTES.exists():
        return sections
    key = ""
    for line in NOTES.read_text().splitlines():
        if line.startswith(HISTORY):
            break  # the earlier rounds stay in the notes, out of the report
        if line.startswith("## "):
            key = line[3:].strip()
            sections[key] = ""
        elif key:
            sections[key] += line + "\n"
    return {k: v.strip() for k, v in sections.items()}


def _table(out: list[str], figs: dict[str, Figure], prefix: str, head: str) -> None:
    chosen = [f for f in figs.values() if f.key.startswith(prefix)]
    out.append(f"| {head} | median | min | max | n | compared with | ratio |")
    out.append("|---|---|---|---|---|---|---|")
    out.extend(_row(f, figs) for f in chosen)
    out.append("")
    for f in chosen:
        against = f" Compared with: {figs[f.floor].title}." if f.floor else ""
        note = f" ({f.note})" if f.note else ""
        out.append(f"- **{f.title}**: {f.timed}.{against}{note}")
    out.append("")


def render(res: Results, started: dt.datetime, seconds: float, load: Sequence[float]) -> str:
    figs = res.figures
    text = notes()
    out: list[str] = []
    add = out.append
    add("# Performance")
    add("")
    add(
        "Generated by `scripts/bench` (`python -m benchmarks.bench"
        + (" --quick" if res.quick else "")
        + "`): do not edit by hand, every run rewrites the figures. The analysis at the end is "
        "kept in `benchmarks/notes.md`."
    )
    add("")
    add(
        "The machine is shared and noisy, so every tether figure stands next to a **floor "
        "measured in the same run**, interleaved with it (round by round, so both see the same "
        "load), and is read as a ratio to it. Each figure is a median with its min, max and "
        "number of samples n. Times are `time.perf_counter_ns` unless said otherwise. A ratio "
        "is always this row's median ÷ the median it is compared with (tether ÷ floor): for a "
        "time lower is better, for a throughput higher is. Targets are judged on medians; a "
        "target row says *unsteady* when the upper quartile of a figure it compares is more "
        f"than {UNSTEADY:.0f}{X} the lower one: the machine was too busy for that ratio to mean "
        "much."
    )
    if res.quick:
        add("")
        add("**Quick mode: tiny sample counts, for the smoke test only. Not a measurement.**")
    add("")
    add("## Machine")
    add("")
    for k, v in machine().items():
        add(f"- {k}: {v}")
    add(f"- date: {started.strftime('%Y-%m-%d %H:%M UTC')}; the whole run took {seconds:.0f} s")
    add(
        f"- load average (1 min) at start {load[0]:.2f}, at end {load[1]:.2f} (the "
        "machine's processes, this run's own among them: its 256-child groups lift it, and a "
        "run started soon after another starts under what is left of it)"
    )
    add("")
    add("## Targets")
    add("")
    add("| target | measured (medians) | ratio | |")
    add("|---|---|---|---|")
    missed = set()
    unmeasured = set()
    for t in TARGETS:
        try:
            met, measured, ratio = t.check(figs)
        except KeyError:  # a run of some groups only (`--only`)
            add(f"| {t.text} | not measured in this run | | |")
            unmeasured.add(t.key)
            continue
        if not met:
            missed.add(t.key)
        add(f"| {t.text} | {measured} | {ratio} | {'met' if met else '**missed**'} |")
    add("")
    add("## Floors")
    add("")
    _table(out, figs, "floor.", "floor")
    add("## tether")
    add("")
    _table(out, figs, "tether.", "figure")
    add("## Context")
    add("")
    add("Not targets: figures that split the tether ones into their parts.")
    add("")
    _table(out, figs, "context.", "figure")
    if any(k.startswith("providers.") for k in figs):
        add("## Providers")
        add("")
        add(
            "One whole scripted run through each provider of a supervisor, each beside the "
            "floor that provider cannot avoid (see `tether.parent.providers`)."
        )
        add("")
        _table(out, figs, "providers.", "provider")
    add("## Analysis")
    add("")
    if "intro" in text:
        add(text["intro"])
        add("")
    for t in TARGETS:
        if t.key in text:
            state = (
                "not measured in this run"
                if t.key in unmeasured
                else "missed in this run"
                if t.key in missed
                else "met in this run"
            )
            add(f"### {t.text} ({state})")
            add("")
            add(text[t.key])
            add("")
    for key, title in (
        ("spawn", "Cold spawn"),
        ("sandbox", "The sandbox's cost"),
        ("providers", "Every provider's whole run"),
        ("next", "What to look at next"),
    ):
        if key in text:
            add(f"### {title}")
            add("")
            add(text[key])
            add("")
    return "\n".join(out).rstrip() + "\n"
