"""Writing settings: validate first, then edit ``config.toml`` with ``tomlkit`` so comments,
blank lines and unknown keys survive, and replace the file atomically (0600 in a 0700 folder).
``tomlkit`` is imported only here, when saving."""

from __future__ import annotations

import errno
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from navi_desktop.config import (
    MAX_CONFIG_BYTES,
    InvalidSetting,
    SettingError,
    toml_error,
    too_deep,
    unknown,
)
from navi_desktop.config_specs import KEYMAP_KEY, SPECS, BadValue, SettingSpec, key_string
from navi_desktop.errors import DiskError, DiskFull, InvalidInput, NaviError
from navi_desktop.fileio import read_regular, write_private_atomic
from navi_desktop.paths import ensure_private_dir

_HEADER = (
    "# Navi Desktop settings. Edit here or in the settings screen; changes apply live.\n"
    "# Every setting is optional: a missing one takes its default.\n"
)


def _validate_changes(changes: Mapping[str, Any]) -> dict[str, Any]:
    errors: list[SettingError] = []
    out: dict[str, Any] = {}
    for key, value in changes.items():
        spec = SPECS.get(key)
        if spec is None and key.startswith(KEYMAP_KEY + ".") and len(key) > len(KEYMAP_KEY) + 1:
            spec = SettingSpec(key, key_string, "")  # one binding: "ui.keymap.<id>"
        if spec is None:
            errors.append(unknown(key, SPECS))
            continue
        if value is None:
            out[key] = None
            continue
        try:
            out[key] = spec.check(value)
        except BadValue as err:
            errors.append(SettingError(key, str(err)))
    if errors:
        raise InvalidSetting(errors)
    return out


def save_setting(path: Path, key: str, value: Any) -> None:
    """Set one dotted key (``None`` removes it so it takes its default); see save_settings."""
    save_settings(path, {key: value})


def save_settings(path: Path, changes: Mapping[str, Any]) -> None:
    """Validate ``changes`` (dotted key -> value; ``None`` unsets), then write them into
    ``path`` keeping every comment, blank line and unknown key, atomically, mode 0600.

    Raises :class:`InvalidSetting` (an ``InvalidInput``) for a bad key or value, and
    ``InvalidInput`` when the existing file is not valid TOML; the file is unchanged then.
    """
    import tomlkit
    from tomlkit.exceptions import ParseError

    values = _validate_changes(changes)
    path = Path(path)
    try:
        ensure_private_dir(path.parent)
    except OSError as err:
        raise _not_written(err, path) from err
    target = path.resolve() if path.is_symlink() else path  # keep a dotfiles symlink a symlink
    try:
        old_text = read_regular(target, MAX_CONFIG_BYTES).decode("utf-8")
    except FileNotFoundError:
        old_text = None
    except OSError as err:
        reason = err.strerror or err
        raise InvalidInput(f"cannot read {path}: {reason}; the file was not changed") from err
    except UnicodeDecodeError as err:
        raise InvalidInput(f"cannot read {path}: {err}; the file was not changed") from err
    try:
        if old_text is not None:
            tomllib.loads(old_text)
        doc = tomlkit.parse(old_text if old_text is not None else _HEADER)
    except tomllib.TOMLDecodeError as err:
        outcome = "fix it in an editor first; the file was not changed"
        raise InvalidInput(str(toml_error(path, err, outcome))) from err
    except ParseError as err:  # tomlkit stricter than tomllib: unlikely
        raise InvalidInput(f"{path}: {err}; the file was not changed") from err
    except (ValueError, RecursionError) as err:  # past the parser's own limits
        raise InvalidInput(
            f"cannot read {path}: {too_deep(err)}: fix it in an editor first; the file was not"
            " changed"
        ) from err

    order = {key: i for i, key in enumerate(SPECS)}
    for key in sorted(values, key=lambda k: order.get(k, len(order))):
        value = values[key]
        section, name = key.split(".", 1)
        _apply(doc, section, name, value, tomlkit)

    new_text = tomlkit.dumps(doc)
    if new_text == old_text or (old_text is None and new_text == _HEADER):
        return  # nothing to change (e.g. unsetting keys of a file that does not exist)
    tomllib.loads(new_text)  # never write a file we could not read back
    try:
        write_private_atomic(target, new_text)
    except OSError as err:
        raise _not_written(err, target) from err


def _not_written(err: OSError, path: Path) -> NaviError:
    """One line for a save the OS refused (the temp file is gone, the file unchanged): the
    daemon answered a full disk with "internal error in settings.set: OSError"."""
    from navi_desktop.disk import free_bytes, megabytes

    folder = path.parent
    kept = "the settings were not changed"
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        return DiskFull(
            f"disk full: {megabytes(free_bytes(folder))} MB free in {folder}; {kept}: free"
            " some space, then save again"
        )
    if err.errno == errno.EROFS:
        return DiskError(
            f"cannot write {path}: its file system is read-only; {kept}: mount it read-write"
            " again, then save again"
        )
    if err.errno in (errno.EACCES, errno.EPERM):
        return NaviError(
            f"cannot write {path}: permission denied; {kept}: give your user access to"
            f" {folder} (e.g. `chmod u+rwx {folder}`), then save again"
        )
    reason = err.strerror or type(err).__name__
    kind = DiskError if err.errno == errno.EIO else NaviError
    return kind(
        f"cannot write {path}: {reason[:1].lower() + reason[1:]}; {kept}: check {folder},"
        " then save again"
    )


def _apply(doc: Any, section: str, name: str, value: Any, tomlkit: Any) -> None:
    if section not in doc:
        if value is None:
            return
        doc[section] = tomlkit.table(is_super_table=section == "ui" and name.startswith("keymap"))
    table = doc[section]
    if not isinstance(table, Mapping):
        raise InvalidInput(
            f"{section}: is not a table in the file; fix it in an editor first:"
            " the file was not changed"
        )
    if section == "ui" and name.startswith("keymap"):
        _apply_keymap(table, name, value, tomlkit)
        return
    if value is None:
        if name in table:
            del table[name]
        return
    if name in table and _same(_unwrap(table[name]), value):
        return  # unchanged: keep the user's formatting (120 stays 120, not 120.0)
    table[name] = value


def _apply_keymap(ui: Any, name: str, value: Any, tomlkit: Any) -> None:
    if name == "keymap":  # the whole table
        if value is None:
            if "keymap" in ui:
                del ui["keymap"]
            return
        if "keymap" not in ui:
            ui["keymap"] = tomlkit.table()
        table = ui["keymap"]
        if not isinstance(table, Mapping):
            ui["keymap"] = tomlkit.table()
            table = ui["keymap"]
        for binding in [b for b in table if b not in value]:
            del table[binding]
        for binding, key in value.items():
            if binding not in table or _unwrap(table[binding]) != key:
                table[binding] = key
        return
    binding = name.split(".", 1)[1]  # "keymap.<binding id>"
    if "keymap" not in ui:
        if value is None:
            return
        ui["keymap"] = tomlkit.table()
    table = ui["keymap"]
    if not isinstance(table, Mapping):
        raise InvalidInput(
            f"{KEYMAP_KEY}: is not a table in the file; fix it in an editor first:"
            " the file was not changed"
        )
    if value is None:
        if binding in table:
            del table[binding]
    elif binding not in table or _unwrap(table[binding]) != value:
        table[binding] = value


def _same(old: Any, new: Any) -> bool:
    return old == new and isinstance(old, bool) == isinstance(new, bool)


def _unwrap(item: Any) -> Any:
    return item.unwrap() if hasattr(item, "unwrap") else item
