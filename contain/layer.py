"""A layered workspace in the child: an overlay mount over the workspace, made in the child's
own mount namespace before its first instruction.

Theory of operation
-------------------
The parent makes the layer directory (`tether.parent.process.layers`): `upper/` and `work/`
inside a directory of its own (mode 0700, its owner's), so once the run is over nothing of the
child can reach it, and `base/`, the workspace as it is when the layer is made, every file a
hard link (no data copied), directories and links made anew. The child's plan names the layer
directory (`Plan.layer`); the contained-exec sequence mounts an overlay over the workspace path
with `base/` as its read-only lower layer (the live workspace where the parent could make no
`base/`: another file system) and `upper/` as the layer that takes every write, so whatever the
child writes, creates, renames or deletes lands in `upper/` (deletions as whiteouts) and the
workspace itself is never written. A change applied to the workspace meanwhile (a sibling's
change set, which replaces files by renaming new ones over them) leaves `base/` as it was: the
child keeps seeing the workspace as it was when it started.

- As root (`mounts.overlay_from_clones`), inside the sandbox's private mount namespace: the
  lower layer is the workspace's idmapped clone (the child owns what it finds there, as in a
  shared run), the layer directory a plain clone taken before /tmp is covered; both are
  attached under a staging directory in the private /tmp (plain paths, so no workspace name
  with a `,` or `:` ever reaches the overlay's options), the overlay is mounted over the
  workspace path, and the staging mounts are detached again: the overlay holds its layers,
  and nothing else in the child's view leads to the real workspace or the layer directory.
- Without root (`over_path`), in the user namespace of the child's own that the sequence
  makes (`mounts.user_namespace`), with `userxattr` (the overlay's own xattrs in the `user.`
  namespace, which an unprivileged overlay needs); the layers are named through
  `/proc/self/fd/N` of descriptors opened here, for the same reason.

Options (`mounts.OVERLAY_OPTIONS`): `redirect_dir=nofollow` (a directory renamed inside the
layer is copied: `rename(2)` says `EXDEV`; no redirect xattr is made for the parent to
interpret, nor followed in a lower layer; an unprivileged overlay takes no other value),
`metacopy=off` (a chmod copies the file up whole), `index=off`, `xino=off`. A read-only view of
a layer (a verifier's) stacks the layer's `upper/` as a second lower layer over the workspace,
with no upper layer at all.

Only the standard library (see `_sys.py`).
"""

from __future__ import annotations

import os

from tether.contain import mounts


def over_path(workspace: str, layer: str, *, read_only: bool) -> None:
    """Without root, in a user namespace and mount namespace of this process's own: the
    overlay over `workspace` from the layer directory `layer`. Raises `OSError`."""
    flags = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC
    frozen = os.path.join(layer, "base")
    lower = os.open(frozen if os.path.isdir(frozen) else workspace, flags)
    try:
        top = os.open(layer, flags | os.O_NOFOLLOW)
        try:
            opts = mounts.overlay_options(
                f"/proc/self/fd/{lower}",
                f"/proc/self/fd/{top}",
                read_only=read_only,
                userxattr=True,
            )
            mounts.mount_overlay(workspace, opts, read_only=read_only)
        finally:
            os.close(top)
    finally:
        os.close(lower)
