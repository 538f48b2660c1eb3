"""Scale-out: the supervisor's `run()` with each child placed on a node of a cluster.

    from tether.parent.placement import RayPlacement

    async with RayPlacement(ChildConfig(), nodes="all", per_node=16) as sup:
        result = await sup.run("...", model="scripted:turns.json")

Ray is an optional extra (`pip install 'tether[ray]'`): nothing here imports it until a
placement is entered. See docs/scale-out.md, and the modules: `rayplacement` (the driver's
front), `nodehost` (the host actor on each node), `relay` (model calls answered in the driver),
`policy` (capacity, selection, full and lost nodes), `lost` (engine failures as results).
"""

from tether.parent.placement.policy import NodeSelection, WhenFull
from tether.parent.placement.rayplacement import RayPlacement, RemoteRun
from tether.parent.placement.wire import DisposedRun, HostInfo, HostReport

__all__ = [
    "DisposedRun",
    "HostInfo",
    "HostReport",
    "NodeSelection",
    "RayPlacement",
    "RemoteRun",
    "WhenFull",
]
