"""Where Navi keeps its files: platformdirs, or everything under ``NAVI_HOME``."""

from __future__ import annotations

import getpass
import os
import re
import shlex
import stat
import warnings
from dataclasses import dataclass
from pathlib import Path

from navi_desktop.errors import InvalidInput, NaviError

APP_NAME = "navi-desktop"
CONFIG_FILE_NAME = "config.toml"
PROFILE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"  # the daemon's parameter check too
_PROFILE_RE = re.compile(PROFILE_PATTERN)


@dataclass(frozen=True)
class Paths:
    config: Path
    data: Path
    state: Path
    runtime: Path
    cache: Path

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> Paths:
        env = os.environ if environ is None else environ
        home = env.get("NAVI_HOME")
        if home:
            root = Path(home).expanduser().absolute()
            return cls(
                config=root / "config",
                data=root / "data",
                state=root / "state",
                runtime=root / "run",
                cache=root / "cache",
            )
        import platformdirs

        dirs = platformdirs.PlatformDirs(APP_NAME, appauthor=False)
        with warnings.catch_warnings():
            # Without XDG_RUNTIME_DIR platformdirs falls back to a folder in /tmp and warns on
            # every start; the fallback is checked (ours, not a link) where it is used.
            warnings.simplefilter("ignore")
            try:
                runtime = dirs.user_runtime_dir
            except PermissionError as exc:  # the fallback belongs to someone else
                problem = str(exc).split("; set XDG_RUNTIME_DIR")[0]
                raise UnsafePath(
                    f"the {problem}: set XDG_RUNTIME_DIR to a folder of yours with"
                    " mode 0700 (for example: mkdir -m 700 ~/.navi-run; export"
                    " XDG_RUNTIME_DIR=~/.navi-run), or set NAVI_HOME"
                ) from None
        return cls(
            config=Path(dirs.user_config_dir),
            data=Path(dirs.user_data_dir),
            state=Path(dirs.user_state_dir),
            runtime=Path(runtime),
            cache=Path(dirs.user_cache_dir),
        )

    @property
    def config_file(self) -> Path:
        return self.config / CONFIG_FILE_NAME

    @property
    def daemon_log(self) -> Path:
        return self.state / "daemon.log"

    def profile_db(self, profile: str) -> Path:
        return self.data / "profiles" / check_profile_name(profile) / "memory.db"


def check_profile_name(name: str) -> str:
    if not _PROFILE_RE.fullmatch(name):  # not match: "$" would let a final newline through
        raise InvalidInput(
            f"invalid profile name {name!r}: use 1-64 letters, digits, '_', '-' or '.',"
            " starting with a letter or digit"
        )
    return name


def default_profile() -> str:
    """The OS user name, made safe as a profile name."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "default"
    cleaned = re.sub(r"[^A-Za-z0-9_.-]", "_", user).lstrip("._-")[:64]
    return cleaned or "default"


def make_private_dir(folder: Path) -> bool:
    """Make the folder ``folder`` with mode 0700 whatever the umask (mkdir's mode is masked
    by it); False when something is there already."""
    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:
        return False
    os.chmod(folder, 0o700)  # a umask such as 0277 takes the owner's own bits away
    return True


def _make_parents(path: Path) -> None:
    """Make the missing folders above ``path``, each 0700: mkdir(parents=True) made them 0777
    less the umask, so under ``umask 000`` anyone could swap Navi's folders inside them."""
    for parent in reversed(path.parents):
        if not parent.exists():
            make_private_dir(parent)


class UnsafePath(NaviError):
    """A folder or file the daemon would use is not safely the user's own (a link, another
    user's, not a folder or file). Nothing was changed there."""


def _navi_top(path: Path) -> Path:
    """The highest of Navi's own folders on the way to ``path``: the one just below
    NAVI_HOME, else the platform folder named for Navi, else ``path`` itself. Those above it
    (NAVI_HOME itself, /tmp, the home folder) are the user's, not Navi's to refuse."""
    home = os.environ.get("NAVI_HOME")
    if home:
        root = Path(home).expanduser().absolute()
        if path != root and path.is_relative_to(root):
            return root / path.relative_to(root).parts[0]
    return next((p for p in (path, *path.parents) if p.name == APP_NAME), path)


def ensure_private_dir(path: Path) -> Path:
    """Create ``path`` (and parents) and make the leaf folder private to the user (0700).
    Every folder it creates is 0700 (a folder of profiles shows their names). Navi's own
    folders on the way that are there already are checked (:func:`check_own_folder`)
    before anything is made in them."""
    leaf = Path(path).absolute()
    top = _navi_top(leaf)
    _make_parents(top)
    for folder in reversed([p for p in (leaf, *leaf.parents) if p == top or top in p.parents]):
        if not make_private_dir(folder):
            check_own_folder(folder)
    if leaf.stat().st_mode & 0o777 != 0o700:
        leaf.chmod(0o700)
    return path


def _shared_with(st: os.stat_result) -> str | None:
    """Who else may write in a folder of the user's: others, or a group other than the
    user's own (with user private groups, ``umask 002`` makes folders 0775)."""
    if st.st_mode & stat.S_IWOTH:
        return "others"
    if st.st_mode & stat.S_IWGRP and st.st_gid != os.getegid():
        return f"the group {st.st_gid}"
    return None


def _foreign(path: Path) -> str | None:
    """Why the folder at ``path`` may not be the user's to trust, or None (also when nothing
    or no folder is there: whoever uses it makes it, or says what is wrong)."""
    me = os.geteuid()
    try:
        entry = os.lstat(path)
        st = os.stat(path) if stat.S_ISLNK(entry.st_mode) else entry
    except OSError:
        return None
    if st is not entry and entry.st_uid not in (me, 0):  # planted, wherever it points to
        return f"is a symbolic link of uid {entry.st_uid}'s, not yours (uid {me})"
    if not stat.S_ISDIR(st.st_mode):
        return None
    if st.st_uid != me:
        return f"belongs to uid {st.st_uid}, not to you (uid {me})"
    return _writers(st) if _shared_with(st) is not None else None


def _writers(st: os.stat_result) -> str:
    return f"can be written in by {_shared_with(st)} (mode {stat.S_IMODE(st.st_mode):04o})"


def check_own_folder(path: Path, what: str = "folder") -> None:
    """Refuse a folder of Navi's that another user could have put there or changed: one of
    theirs (a user who could rename the folder above swaps in their own), or one others may
    write in. Used as it was, it showed their memories, and kept the user's there."""
    problem = _foreign(path)
    if problem is not None:
        raise _refusal(path, what, problem)


def _refusal(path: Path, what: str, problem: str) -> UnsafePath:
    if problem.startswith("can be written"):
        fix = (
            f"check that what is in it is yours, then make it private (`chmod 700 {path}`),"
            " or set NAVI_HOME"
        )
    else:
        fix = "move it aside (Navi makes a new one) or set NAVI_HOME"
    return UnsafePath(
        f"refusing the {what} {path}: it {problem}; Navi keeps its files only in folders"
        f" of yours that no one else can write in: {fix}"
    )


def check_own_folders(paths: Paths) -> None:
    """Navi's own folders that are there already (see :func:`check_own_folder`): checked
    before any command reads or writes in them."""
    for folder, what in (
        (paths.config, "config folder"),
        (paths.data, "data folder"),
        (paths.data / "profiles", "profiles folder"),
        (paths.state, "state folder"),
        (paths.runtime, "run folder"),
    ):
        check_own_folder(folder, what)


def ensure_own_dir(path: Path, what: str = "folder") -> Path:
    """Create ``path`` (and parents, 0700) if needed and make sure the leaf is the user's own
    real folder, mode 0700, that no one else may write in; raise :class:`UnsafePath` naming
    it when it is a symbolic link, not a folder, another user's or writable by others. The
    mode is set through the opened folder itself, so a folder swapped in meanwhile is never
    changed."""
    try:
        _make_parents(path)
        make_private_dir(path)  # a link or a file there: named below
    except OSError as exc:
        raise UnsafePath(f"cannot create the {what} {path}: {exc.strerror or exc}") from None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        raise UnsafePath(_not_own_dir(path, what)) from None
    try:
        st = os.fstat(fd)
        if st.st_uid != os.geteuid():
            raise UnsafePath(_not_own_dir(path, what))
        if _shared_with(st) is not None:
            raise _refusal(path, what, _writers(st))
        if stat.S_IMODE(st.st_mode) != 0o700:
            os.fchmod(fd, 0o700)
    finally:
        os.close(fd)
    return path


def _not_own_dir(path: Path, what: str) -> str:
    """Why ``path`` is refused as the user's own folder, with the fix, in one line."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        return f"cannot open the {what} {path}: {exc.strerror or exc}"
    if stat.S_ISLNK(st.st_mode):
        problem = f"is a symbolic link (to {os.readlink(path)})"
    elif not stat.S_ISDIR(st.st_mode):
        problem = "is not a folder"
    elif st.st_uid != os.geteuid():
        problem = f"belongs to uid {st.st_uid}, not to you (uid {os.geteuid()})"
    else:
        problem = "cannot be opened"
    return (
        f"refusing the {what} {path}: it {problem}; Navi keeps its socket, lock and log only"
        " in a real folder of your own: remove it (Navi makes a new one) or set NAVI_HOME"
    )


def profile_of(path: Path) -> str | None:
    """The profile a file at ``<data>/profiles/NAME/memory.db`` holds, else None."""
    path = Path(path)
    if path.name == "memory.db" and path.parent.parent.name == "profiles":
        return path.parent.name
    return None


def profile_flag(profile: str | None) -> str:
    """`` --profile NAME`` for a command shown to the user: without it the command would act
    on the default profile, where the same id names something else. '' when not known."""
    return f" --profile {shlex.quote(profile)}" if profile else ""


def profile_option(path: Path) -> str:
    """`` --profile NAME`` for a file at ``<data>/profiles/NAME/memory.db``, else ''."""
    return profile_flag(profile_of(path))
