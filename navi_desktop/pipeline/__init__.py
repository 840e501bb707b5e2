"""The memory pipeline: what goes into each prompt, and how a finished conversation becomes
long-term memory. Runs inside the daemon; talks to a model only through the ``llm`` seam."""
