"""Continuable agents: durable sessions, their transcripts, and the tools that continue them."""
