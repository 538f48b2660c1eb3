"""Network by policy: a run's egress proxy in the parent, the child's only way out.

`policy.py` says what a run may reach (`NetworkPolicy`: `none`, or an allowlist of
`host[:ports]` with wildcards and credentials), `addresses.py` how names are resolved and
which addresses are never relayed to, `proxy.py` the proxy itself (h11), `sockets.py` its
sockets and the kernel-side relay of tunnels, `tls.py` the per-run certificate authority for
credential destinations, `scrub.py` what keeps a credential out of responses, `events.py` the
decisions it reports, and `seat.py` one run's proxy wired to its child (listener, environment,
trust). Nothing is imported here: `ChildConfig` imports the policy alone, and a supervisor
whose runs have no network never loads the proxy (a test checks).
"""
