"""A parent process for the test that SIGKILLs it: a Supervisor with a warm pool of two
(for the workspace argv[1], where the host can sandbox), which prints `{"pooled": [PID, PID]}`
once both are ready and then waits forever."""

import json
import sys

import anyio

from tether.parent.supervisor import PoolSpec, Supervisor


async def main() -> None:
    async with Supervisor(pool=PoolSpec(2, workspace=sys.argv[1])) as sup:
        assert sup.pool is not None
        with anyio.fail_after(20):
            await sup.pool.wait_ready()
        sys.stdout.write(json.dumps({"pooled": sup.pool.ready_pids}) + "\n")
        sys.stdout.flush()
        await anyio.sleep(60)


anyio.run(main)
