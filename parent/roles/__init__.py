"""What an agent is, below every way of running one: sub-agent definitions and their files
(`definitions.py`), the five built-in roles and their wire form (`builtins.py`), and the
system prompts a sub-agent and an orchestrator are given (`prompts.py`). The run core resolves
a role name here; the delegation layer registers and offers definitions from here."""
