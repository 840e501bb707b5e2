"""The ``navi`` argument parser and dispatch.

Startup cost matters: this module and the command modules import only the standard library at
import time; each command imports the memory engine (numpy, aiosqlite, SQLite) when it runs.

Exit codes: 0 success; 1 a failure not caused by the input (Ollama down, disk, lock, a file
or folder the OS refuses, a chat reply stopped before its end) or a declined prompt; 2 bad
input (usage, unknown id, invalid file, corrupt profile file, a second daemon); 130
interrupted.
"""

from __future__ import annotations

import argparse
import errno
import os
import sys
from pathlib import Path

from navi_desktop import __version__
from navi_desktop.cli.output import (
    OutputError,
    bytes_through,
    error,
    output_failure,
    whole_stdout,
)
from navi_desktop.errors import CorruptDatabase, InvalidInput, NaviError
from navi_desktop.stopping import remove_temporaries_on_stop


class CommandError(Exception):
    """A failure to report as one line, with its exit code (1 when not the input's fault)."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def build_parser(commands: bool = True) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="navi",
        description="Navi Desktop: a local-first terminal assistant that remembers you.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument(
        "--incognito",
        dest="app_incognito",
        action="store_true",
        help="open the app in incognito: nothing is saved",
    )
    parser.add_argument(
        "--profile", dest="app_profile", metavar="NAME", help="memory profile for the app"
    )
    parser.set_defaults(help_parser=parser)
    if commands:
        from navi_desktop.cli import config_check, daemon_cmds, memory

        subparsers = parser.add_subparsers(title="commands", metavar="COMMAND")
        memory.register(subparsers)
        daemon_cmds.register(subparsers)
        config_check.register(subparsers)
    return parser


def run_app(args: argparse.Namespace) -> int:
    """``navi`` alone opens the app (imported here: the commands never load Textual)."""
    from navi_desktop.paths import Paths, check_profile_name
    from navi_desktop.tui.app import NaviApp

    profile = check_profile_name(args.app_profile) if args.app_profile else None
    NaviApp(Paths.from_env(), profile=profile, incognito=args.app_incognito or None).run()
    return 0


def apply_app_options(args: argparse.Namespace) -> None:
    """``navi --profile NAME COMMAND`` and ``navi --incognito COMMAND``: options written before
    the command are the command's. Before, the command ran without them: on the default
    profile, and a chat meant to leave no trace was saved. A command that cannot honour one
    is refused, never run without it."""
    leaf = args.help_parser
    takes = {action.dest for action in leaf._actions}  # argparse has no public list of them
    if args.app_profile:
        if "profile" not in takes:
            raise InvalidInput(f"`{leaf.prog}` works on no profile: leave out --profile")
        given = getattr(args, "profile", None)
        if given and given != args.app_profile:
            raise InvalidInput(
                f"two profiles given, {args.app_profile!r} and {given!r}: give one --profile"
            )
        args.profile = args.app_profile
    if args.app_incognito:
        if "incognito" not in takes:
            raise InvalidInput(
                f"`{leaf.prog}` has no incognito mode (only the app and `navi chat` do):"
                " nothing was done"
            )
        args.incognito = True


PATH_ARGUMENTS = frozenset({"file", "output"})  # a file's name may be any bytes; the rest is text


def check_text(args: argparse.Namespace) -> None:
    """Refuse an argument that is not UTF-8 text (Python keeps its bytes as lone surrogates,
    which no memory, frame or log line can hold) before anything is done with it."""
    for name, value in vars(args).items():
        for item in value if isinstance(value, list) else [value]:
            if name in PATH_ARGUMENTS or not isinstance(item, str):
                continue
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                try:
                    shown = repr(item.encode("utf-8", "surrogateescape"))[1:]
                except UnicodeEncodeError:
                    shown = repr(item.encode("utf-8", "backslashreplace"))[1:]
                raise InvalidInput(
                    f"an argument is not UTF-8 text: {shown}; check the terminal's encoding"
                    " (locale), or what passed it"
                ) from None


def _warn_config() -> None:
    """config.toml's problems (cli/config_check.py), and this shell's host variables that
    hold no host, as warning lines on stderr."""
    from navi_desktop.cli import config_check
    from navi_desktop.ollama_host import env_host_problems
    from navi_desktop.paths import Paths

    config_check.warn(Paths.from_env())
    for problem in env_host_problems():  # this shell's: a daemon it starts reads the same
        print(f"navi: warning: {problem}", file=sys.stderr)


def os_error_line(err: OSError) -> str:
    """One line for an OS error that no command turned into its own: the path, the reason,
    and what to do (for a permission, the folder that refuses and the chmod that opens it)."""
    if err.strerror:
        reason = err.strerror[:1].lower() + err.strerror[1:]
    else:
        timed_out = isinstance(err, TimeoutError)
        reason = str(err) or ("it timed out" if timed_out else type(err).__name__)
    if not isinstance(err.filename, str | bytes):  # not about a path (a socket, a timeout)
        return f"an operation failed: {reason}; try again"
    from navi_desktop.disk import refusing_folder

    path = Path(os.fsdecode(err.filename)).absolute()
    if err.errno in (errno.EACCES, errno.EPERM):
        if (folder := refusing_folder(path)) is not None:  # a folder on the way cannot be searched
            which = "its folder" if folder == path.parent else "the folder"
            return (
                f"cannot use {path}: {reason} on {which} {folder}: give your user access to"
                f" it (e.g. `chmod u+rwx {folder}`), then try again"
            )
        return (
            f"cannot use {path}: {reason}: give your user access to it (e.g. `chmod u+rw"
            f" {path}`), then try again"
        )
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"cannot use {path}: {reason}: free some space, then try again"
    return f"cannot use {path}: {reason}: check that path, then try again"


def run(argv: list[str] | None = None) -> int:
    """Run ``navi`` with these arguments; returns the exit code (never raises SystemExit)."""
    argv = sys.argv[1:] if argv is None else argv
    # `navi` alone opens the app: the commands' parsers are not built (start-up time).
    parser = build_parser(commands=bool(argv))
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a usage error (already printed)
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    handler = getattr(args, "handler", None)
    if handler is None:
        if args.help_parser is not parser:  # a command group without its command
            args.help_parser.print_help()
            return 0
        handler = run_app
    remove_temporaries_on_stop()  # a copy written in a thread, then SIGTERM: none left
    try:
        check_text(args)
        if handler is not run_app:  # the app draws on the terminal itself
            whole_stdout()
        bytes_through()
        _check_folders()
        if handler is not run_app:  # the app shows config.toml's problems in its banner
            apply_app_options(args)
            if not getattr(args, "quiet_config", False):  # `navi config check` says them all
                _warn_config()
        try:
            return handler(args)
        finally:
            if sys.stdout is not None:  # None: started with stdout closed
                # Here, in the net: a flush that fails at exit is only a warning, exit 0.
                sys.stdout.flush()
    except (InvalidInput, CorruptDatabase) as err:  # the request itself is wrong
        error(str(err))
        return 2
    except NaviError as err:  # the request was fine; something it needs is not (Ollama, daemon)
        error(str(err))
        return 1
    except CommandError as err:
        error(str(err))
        return err.code
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (``navi memory list | head``): stop quietly.
        _drop_output()
        return 1
    except OutputError as err:  # a full disk under `navi memory export > file`
        error(output_failure(err))
        _drop_output()
        return 1
    except OSError as err:  # a net under every command: one line, never a traceback
        error(os_error_line(err))
        return 1


def _check_folders() -> None:
    """Navi's folders another user could have put in place (paths.check_own_folders)."""
    from navi_desktop.paths import Paths, check_own_folders

    check_own_folders(Paths.from_env())


def _drop_output() -> None:
    """Send what is still buffered for stdout to /dev/null: its flush at exit would fail
    again, with a warning after the line that said why."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
