"""Where Navi keeps its files: platformdirs, or everything under ``NAVI_HOME``."""

from __future__ import annotations

import getpass
import os
import re
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


def ensure_private_dir(path: Path) -> Path:
    """Create ``path`` (and parents) and make the leaf folder private to the user (0700).
    Parents it creates are private too (mkdir's mode is not theirs): a folder of profiles
    shows their names."""
    for missing in reversed([p for p in (path, *path.parents) if not p.exists()]):
        missing.mkdir(exist_ok=True, mode=0o700)
    if path.stat().st_mode & 0o777 != 0o700:
        path.chmod(0o700)
    return path


class UnsafePath(NaviError):
    """A folder or file the daemon would use is not safely the user's own (a link, another
    user's, not a folder or file). Nothing was changed there."""


def ensure_own_dir(path: Path, what: str = "folder") -> Path:
    """Create ``path`` (and parents) if needed and make sure the leaf is the user's own real
    folder, mode 0700; raise :class:`UnsafePath` naming it when it is a symbolic link, not a
    folder, or another user's. The mode is set through the opened folder itself, so a
    folder swapped in meanwhile is never changed."""
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
    except FileExistsError:
        pass  # a link or a file: named below
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
