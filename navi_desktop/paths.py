"""Where Navi keeps its files: platformdirs, or everything under ``NAVI_HOME``."""

from __future__ import annotations

import getpass
import os
import re
from dataclasses import dataclass
from pathlib import Path

from navi_desktop.errors import InvalidInput

APP_NAME = "navi-desktop"
CONFIG_FILE_NAME = "config.toml"
_PROFILE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


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
        return cls(
            config=Path(dirs.user_config_dir),
            data=Path(dirs.user_data_dir),
            state=Path(dirs.user_state_dir),
            runtime=Path(dirs.user_runtime_dir),
            cache=Path(dirs.user_cache_dir),
        )

    @property
    def config_file(self) -> Path:
        return self.config / CONFIG_FILE_NAME

    def profile_db(self, profile: str) -> Path:
        return self.data / "profiles" / check_profile_name(profile) / "memory.db"


def check_profile_name(name: str) -> str:
    if not _PROFILE_RE.match(name) or name in {".", ".."}:
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
    """Create ``path`` (and parents) and make the leaf folder private to the user (0700)."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    if path.stat().st_mode & 0o777 != 0o700:
        path.chmod(0o700)
    return path
