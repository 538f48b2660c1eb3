"""`tether doctor`: what this host offers for containment, what enforces each limit, and which
providers can run a sub-agent here."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tether.contain import landlock, seccomp
from tether.contain.plan import DEFAULT_SANDBOX_ID
from tether.parent.process import cgroup_join
from tether.parent.process.host import ROOT, TIERS, Host, available, probe
from tether.parent.process.isolation import FORCE_ABI_ENV, probe_host
from tether.parent.process.keeper import KEEPER
from tether.parent.process.launchers import LAUNCHERS, readiness


def _bwrap() -> dict[str, Any]:
    path = shutil.which("bwrap")
    if path is None:
        return {"installed": False, "works": False, "why": "not installed (Debian: bubblewrap)"}
    try:
        got = subprocess.run(
            [path, "--unshare-net", "--ro-bind", "/", "/", "true"],
            capture_output=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"installed": True, "path": path, "works": False, "why": str(exc)}
    if got.returncode != 0:
        why = got.stderr.decode(errors="replace").strip() or f"exit status {got.returncode}"
        return {
            "installed": True,
            "path": path,
            "works": False,
            "why": f"cannot create namespaces (user namespaces unavailable?): {why}",
        }
    return {"installed": True, "path": path, "works": True}


def _landlock() -> dict[str, Any]:
    abi = landlock.kernel_abi()
    if abi == 0:
        return {"available": False, "why": "landlock_create_ruleset: not built in or disabled"}
    return {"available": True, "abi": abi}


def _install() -> dict[str, Any]:
    """Whether tether's installation can start children: the trampoline (the probe's trial
    starts it with `-I -S`) and the child runtime under `python -I`. A broken installation is
    named as such, never as a host that cannot sandbox."""
    problem = probe_host().install_problem
    if problem is None:
        try:
            got = subprocess.run(
                [sys.executable, "-I", "-c", "import tether.child.entry"],
                capture_output=True,
                text=True,
                timeout=30,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            problem = f"the child runtime could not be started: {exc}"
        else:
            if got.returncode != 0:
                last = (got.stderr.strip().splitlines() or [""])[-1]
                problem = (
                    f"`{sys.executable} -I -m tether.child` cannot import its runtime: {last}. "
                    "tether's installation is broken: reinstall it"
                )
    return {"ok": problem is None, **({"problem": problem} if problem else {})}


def _isolation() -> dict[str, Any]:
    got = probe_host()
    out: dict[str, Any] = {
        "auto": got.best,
        "sandbox": got.why_not is None and got.install_problem is None,
        "landlockAbi": got.landlock_abi,
        "seccomp": seccomp.available(),
        "localSockets": {"allowed": got.local_sockets, "how": got.local_sockets_why},
    }
    if got.forced:
        out["forced"] = f"{FORCE_ABI_ENV}={os.environ.get(FORCE_ABI_ENV, '')}"
    if got.install_problem is not None:
        out["untried"] = "tether's installation is broken (see install)"
    elif got.why_not is not None:
        out["why"] = got.why_not
        out["warning"] = (
            "this host cannot sandbox children: they run with process isolation only and can "
            "read what the supervisor's user can read and reach the network"
        )
    else:
        if got.root:
            out["uid"] = DEFAULT_SANDBOX_ID
            out["privateMounts"] = True
        out["gitGuard"] = got.git_unguarded is None
        if got.git_unguarded is not None:
            out["gitGuardWhy"] = got.git_unguarded
    return out


def _network() -> dict[str, Any]:
    """How a run with a network policy is kept to its egress proxy here, and whether
    credentials can be added at the proxy."""
    import importlib.util

    got = probe_host()
    out: dict[str, Any] = {"default": "none"}
    if got.why_not is not None:
        out["enforced"] = "none"
        out["why"] = "no sandbox here: the proxy is offered to the child, nothing keeps it there"
    elif got.root:
        out["enforced"] = "namespace"
    else:
        out["enforced"] = "port"
    spec = importlib.util.find_spec("cryptography")
    out["credentials"] = spec is not None
    if spec is None:
        out["credentialsWhy"] = "the cryptography package is not installed"
    return out


def _layers() -> dict[str, Any]:
    """Which layer a layered run gets here (`tether.parent.process.layers`)."""
    from tether.parent.process import layers as lay

    try:
        where = lay.layers_dir()
    except (lay.LayerError, OSError) as exc:
        return {"method": None, "why": str(exc)}
    got = lay.support()
    limits = lay.LayerLimits()
    out: dict[str, Any] = {
        "method": got.overlay or got.copy,
        "sandboxed": got.overlay or got.copy,
        "otherwise": got.copy,
        "reflink": got.reflink,
        "layersDir": where,
        "copyBound": limits.max_copy_bytes,
    }
    if got.why_not is not None:
        out["overlayWhyNot"] = got.why_not
    if got.forced is not None:
        out["forced"] = f"{lay.FORCE_ENV}={got.forced}"
    return out


def _pidfd() -> dict[str, Any]:
    try:
        fd = os.pidfd_open(os.getpid())
    except (AttributeError, OSError) as exc:
        return {"available": False, "why": str(exc)}
    os.close(fd)
    return {"available": True}


def _subreaper() -> dict[str, Any]:
    libc = ctypes.CDLL(None, use_errno=True)
    pr_get_child_subreaper = 37
    flag = ctypes.c_int(0)
    if libc.prctl(pr_get_child_subreaper, ctypes.byref(flag), 0, 0, 0) != 0:
        return {"available": False, "why": os.strerror(ctypes.get_errno())}
    return {"available": True, "this_process": bool(flag.value)}


def _cgroups() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for tier in TIERS[:-1]:
        got = probe(tier)
        out[tier] = {
            "available": available(got),
            "where": {k: str(v) for k, v in got.parents.items()},
            **({"why": got.why} if got.why else {}),
        }
    unified = ROOT / "cgroup.controllers"
    unified = unified if unified.exists() else ROOT / "unified" / "cgroup.controllers"
    if unified.exists():
        out["cgroup2"]["mount"] = str(unified.parent)
        out["cgroup2"]["controllers"] = unified.read_text().split()
    return out


def _teardown(auto: Host) -> str:
    """How a child's tree is taken down on the tier `auto` picked."""
    if "unified" in auto.parents:
        how = (
            "cgroup.kill"
            if "cgroup.kill" in auto.v2_files
            else "cgroup.freeze, SIGKILL each member, thaw"
            if auto.v2_files
            else "cgroup.kill (where the kernel lacks it: cgroup.freeze, SIGKILL each, thaw)"
        )
        return f"{how} on the child's v2 cgroup; cgroup.events says when it is empty"
    if auto.tier == "cgroup1":
        return "freeze (v1 freezer), SIGKILL every member, thaw"
    return "kill(-pgid), then each process of the tree found by parentage, session and marker"


def _launchers() -> dict[str, Any]:
    """Each launcher, and whether it can run a child here: its program installed and, for
    docker and kubectl, a daemon or a cluster that answers (each asked for at most a second,
    all at once)."""
    kinds = list(LAUNCHERS.values())
    launchers = [kind.make("x" if kind.argument else "") for kind in kinds]
    with ThreadPoolExecutor(max_workers=len(launchers)) as pool:
        why_not = list(pool.map(readiness, launchers))
    out: dict[str, Any] = {}
    for kind, launcher, why in zip(kinds, launchers, why_not, strict=True):
        program = launcher.program
        out[kind.usage] = {
            "summary": kind.summary,
            "program": program,
            "installed": program is None or shutil.which(program) is not None,
            "ready": why is None,
            **({"why": why} if why is not None else {}),
        }
    return out


def _providers(agents: str | None) -> list[dict[str, Any]]:
    from tether.parent.delegation.files import register_providers
    from tether.parent.providers.builtin import builtin_providers

    return register_providers(builtin_providers(), agents).report()


def report(agents: str | None = None) -> dict[str, Any]:
    """The report; `agents`: a definitions file whose `[[provider]]` tables are listed too."""
    tiers = {t: probe(t) for t in TIERS}
    auto = next(h for t, h in tiers.items() if available(h))
    cg = auto.tier != "process-group"
    passed_over = [f"{t}: {h.why}" for t, h in tiers.items() if not available(h)]
    why = "the most complete tier available" + (
        f"; passed over {'; '.join(passed_over)}" if passed_over else ""
    )
    root = os.geteuid() == 0
    mem = auto.enforces("memory") if cg else False
    pids = auto.enforces("pids") if cg else False
    nproc = "RLIMIT_NPROC (per user" + (", and not applied to root)" if root else ")")
    limits = {
        "memory": f"the child's cgroup ({auto.tier}: whole tree, oom kill)"
        if mem
        else "RLIMIT_DATA (per process: a Python child gets MemoryError)",
        "cpu": "RLIMIT_CPU (per process: SIGXCPU at the soft limit, SIGKILL at the hard)",
        "wall": "the supervisor's deadline, then the dispose ladder",
        "idle": "the supervisor's idle watchdog",
        "processes": f"the child's cgroup ({auto.tier} pids.max: whole tree)" if pids else nproc,
        "open_files": "RLIMIT_NOFILE (per process)",
        "file_size": "RLIMIT_FSIZE (per process: SIGXFSZ, or EFBIG in Python)",
    }
    return {
        "python": sys.version.split()[0],
        "root": root,
        "install": _install(),
        "cgroups": _cgroups(),
        "tiers": {t: available(h) for t, h in tiers.items()},
        "auto": {"tier": auto.tier, "why": why, "teardown": _teardown(auto)},
        "cgroupJoin": cgroup_join.report(auto) if cg else {"joinMs": None},
        "bwrap": _bwrap(),
        "landlock": _landlock(),
        "isolation": _isolation(),
        "network": _network(),
        "layers": _layers(),
        "pidfd": _pidfd(),
        "subreaper": _subreaper(),
        "keeper": {"available": KEEPER.exists(), "script": str(KEEPER)},
        "launchers": _launchers(),
        "limits": limits,
        "providers": _providers(agents),
    }


def render(r: dict[str, Any]) -> str:
    lines = [f"tether doctor (python {r['python']}, {'root' if r['root'] else 'not root'})"]
    lines += _containment_lines(r)
    lines += _isolation_lines(r["isolation"])
    lines += _network_lines(r["network"])
    lines += _layer_lines(r["layers"])
    lines += _catalog_lines(r)
    return "\n".join(lines)


def _containment_lines(r: dict[str, Any]) -> list[str]:
    """The install, the containment tiers, bwrap and Landlock."""
    lines: list[str] = []
    inst = r["install"]
    lines.append("install: ok" if inst["ok"] else f"install: BROKEN: {inst['problem']}")
    lines.append(f"containment: auto picks {r['auto']['tier']} — {r['auto']['why']}")
    lines.append(f"  teardown: {r['auto']['teardown']}")
    for tier, info in r["cgroups"].items():
        state = "available" if info["available"] else "not available"
        where = ", ".join(f"{k} at {v}" for k, v in info["where"].items())
        lines.append(f"  {tier}: {state}" + (f" ({where})" if where else ""))
        if info.get("why"):
            lines.append(f"    why: {info['why']}")
    lines.append("  process-group: always available (session/group + tree walk + tree marker)")
    join = r["cgroupJoin"]
    if join["joinMs"] is not None:
        lines.append(f"  a child's cgroup join: {join['joinMs']:.2f} ms")
        if join.get("advice"):
            lines.append(f"    tip: {join['advice']}")
    b = r["bwrap"]
    lines.append(
        "bwrap: "
        + ("works" if b["works"] else ("installed, " if b["installed"] else ""))
        + ("" if b["works"] else f"does not work: {b['why']}")
    )
    ll = r["landlock"]
    lines.append(
        "landlock: " + (f"ABI {ll['abi']}" if ll["available"] else f"no ({ll.get('why', '')})")
    )
    return lines


def _isolation_lines(iso: dict[str, Any]) -> list[str]:
    """What isolation `auto` picks, and what its sandbox refuses."""
    lines: list[str] = []
    if "untried" in iso:
        lines.append(f"isolation: not tried: {iso['untried']}")
    elif iso["sandbox"]:
        how = f"Landlock ABI {iso['landlockAbi']}, seccomp, no_new_privs"
        if "uid" in iso:
            how += f", uid/gid {iso['uid']} with no capability, private mounts"
        lines.append(f"isolation: auto picks sandbox ({how})")
        sockets = iso["localSockets"]
        lines.append(
            "  local UNIX sockets: "
            + (
                f"the run's own reachable, no other ({sockets['how']})"
                if sockets["allowed"]
                else sockets["how"]
            )
        )
        if iso["gitGuard"]:
            how = "read-only mounts" + ("" if "uid" in iso else " in a user namespace")
            lines.append(
                f"  .git/config and .git/hooks: writes refused ({how}; not under bwrap), "
                "unless a run passes --allow-git-config"
            )
        else:
            lines.append(
                "  .git/config and .git/hooks: NOT refused here: changes are only listed "
                "(sensitiveChanges) and always verified"
            )
            lines.append(f"  why: {iso['gitGuardWhy']}")
    else:
        lines.append(f"isolation: auto picks PROCESS ONLY: WARNING: {iso['warning']}")
        lines.append(f"  why: {iso['why']}")
    return lines


def _network_lines(net: dict[str, Any]) -> list[str]:
    """How a run's egress proxy is enforced here, and its credentials."""
    lines: list[str] = []
    how = {
        "namespace": "kept to it by a private network namespace whose one listener is the "
        "proxy's (no route, no resolver, no other port)",
        "port": "kept to it by the Landlock port rule (the proxy's port only, but on any "
        "address: not root, so no private network namespace)",
        "none": "NOT enforced here: " + str(net.get("why", "")),
    }[net["enforced"]]
    lines.append(
        "network: none by default; --allow-net HOST[:PORT] sends a run through its own egress "
        f"proxy, {how}"
    )
    lines.append(
        "  credentials (--net-credential): "
        + (
            "added at the proxy behind a per-run CA, never in the child"
            if net["credentials"]
            else f"not available: {net['credentialsWhy']}"
        )
    )
    return lines


def _layer_lines(lay: dict[str, Any]) -> list[str]:
    """How a layered workspace is made here."""
    lines: list[str] = []
    if lay["method"] is None:
        lines.append(f"layered workspaces: NOT available: {lay['why']}")
    else:
        explain = {
            "overlay": "an overlay in the child's private mount namespace",
            "overlay-userns": "an overlay in a user namespace of the child's own",
            "reflink": "a reflink copy (FICLONE) of the workspace",
            "copy": f"a plain copy of the workspace, at most {lay['copyBound']} bytes",
        }
        lines.append(
            f"layered workspaces: a sandboxed run gets {explain[lay['sandboxed']]} (layers in "
            f"{lay['layersDir']})"
        )
        if lay["sandboxed"] != lay["otherwise"] or lay.get("overlayWhyNot"):
            other = explain[lay["otherwise"]]
            lines.append(f"  otherwise (no sandbox, a launcher, a foreign agent): {other}")
        if lay.get("overlayWhyNot"):
            lines.append(f"  no overlay: {lay['overlayWhyNot']}")
    return lines


def _catalog_lines(r: dict[str, Any]) -> list[str]:
    """The kernel's helpers, the launchers, the limits and the providers."""
    lines: list[str] = []
    lines.append("pidfd: " + ("yes" if r["pidfd"]["available"] else "no"))
    lines.append("subreaper: " + ("yes" if r["subreaper"]["available"] else "no"))
    lines.append("keeper: " + ("yes" if r["keeper"]["available"] else "missing"))
    lines.append("launchers:")
    for usage, info in r["launchers"].items():
        state = "ready" if info["ready"] else f"not ready: {info['why']}"
        lines.append(f"  {usage}: {info['summary']} ({state})")
    lines.append("limits, and what enforces each here:")
    for name, how in r["limits"].items():
        lines.append(f"  {name}: {how}")
    lines.append("providers (tether run --provider NAME):")
    for p in r["providers"]:
        state = "ready" if p["ready"] else f"not ready: {p['why']}"
        lines.append(f"  {p['name']}: {p['summary']} ({state})")
    return lines
