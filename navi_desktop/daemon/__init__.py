"""The Navi daemon: the one long-lived process per OS user (socket RPC, sessions, timers)."""
