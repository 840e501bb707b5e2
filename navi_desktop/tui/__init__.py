"""The Textual TUI: a client of the daemon. It never opens the database and never imports
``ollama``; only this package imports Textual. Import ``navi_desktop.tui.app`` to run it."""
