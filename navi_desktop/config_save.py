"""Writing settings: validate first, then edit ``config.toml`` with ``tomlkit`` so comments,
blank lines and unknown keys survive, and replace the file atomically (0600 in a 0700 folder).
``tomlkit`` is imported only here, when saving."""

from __future__ import annotations

import contextlib
import os
import tomllib
from collections.abc import Iterator, Mapping
from functools import partial
from pathlib import Path
from typing import Any

from navi_desktop.config import (
    MAX_CONFIG_BYTES,
    InvalidSetting,
    SettingError,
    cannot_read,
    toml_error,
    too_deep,
    unknown,
)
from navi_desktop.config_specs import (
    KEYMAP_KEY,
    SPECS,
    BadValue,
    SettingSpec,
    binding_id,
    key_string,
)
from navi_desktop.errors import InvalidInput, NaviError
from navi_desktop.fileio import locked, read_regular, write_private_atomic
from navi_desktop.os_errors import os_refusal
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
            try:
                if value is not None:  # removing a mistyped one is fine
                    binding_id(key[len(KEYMAP_KEY) + 1 :])
            except BadValue as err:
                errors.append(SettingError(key, str(err)))
                continue
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

    One writer at a time (the folder's lock: two saves at once each kept only its own change),
    and the file is read again just before it is replaced: an editor's save made meanwhile is
    edited in turn, never overwritten. Raises :class:`InvalidSetting` (an ``InvalidInput``)
    for a bad key or value, and ``InvalidInput`` when the existing file cannot be edited; the
    file is unchanged then.
    """
    values = _validate_changes(changes)
    path = Path(path)
    try:
        ensure_private_dir(path.parent)
    except OSError as err:
        raise _not_written(err, path) from err
    with _one_writer(path):
        for _ in range(SAVE_TRIES):
            # Through a dotfiles link to its file, so the link stays a link.
            target = Path(os.path.realpath(path)) if path.is_symlink() else path
            old_text = _read(path, target)
            new_text = _edited(path, old_text, values)
            if new_text is None:
                return  # nothing to change
            try:
                write_private_atomic(target, new_text, check=partial(_unchanged, old_text=old_text))
            except _ChangedMeanwhile:
                continue
            except OSError as err:
                raise _not_written(err, target) from err
            return
    raise NaviError(
        f"{path} kept changing while it was being saved (another program writes it); the"
        " settings were not changed: close that program, then save again"
    )


SAVE_TRIES = 5
LOCK_WAIT_S = 10.0  # another save holds it for milliseconds


class _ChangedMeanwhile(Exception):
    """The file changed between reading it and replacing it."""


@contextlib.contextmanager
def _one_writer(path: Path) -> Iterator[None]:
    """Hold the config folder's lock alone while reading, editing and replacing the file (per
    open folder, so two threads of one daemon wait for each other as processes do)."""
    try:
        fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as err:
        raise _not_written(err, path) from err
    with contextlib.ExitStack() as stack:
        stack.callback(os.close, fd)
        try:
            stack.enter_context(locked(fd, wait_s=LOCK_WAIT_S, strict=True))
        except BlockingIOError:
            raise NaviError(
                f"another program holds the lock of {path.parent} (a save that does not end);"
                " the settings were not changed: close it, then save again"
            ) from None
        yield


def _read(path: Path, target: Path) -> str | None:
    """The file's text, None when there is none."""
    try:
        return read_regular(target, MAX_CONFIG_BYTES).decode("utf-8")
    except FileNotFoundError:
        return None
    except OSError as err:
        raise InvalidInput(cannot_read(path, err, "the file was not changed")) from err
    except UnicodeDecodeError as err:
        raise InvalidInput(
            f"{path} is not UTF-8 text (byte {err.start}): fix it in an editor (or remove it);"
            " the file was not changed"
        ) from err


def _unchanged(held: Path, old_text: str | None) -> None:
    """Raises unless ``held`` (the file the save replaces) is the text that was read."""
    try:
        now = read_regular(held, MAX_CONFIG_BYTES).decode("utf-8", "replace")
    except FileNotFoundError:
        now = None
    except OSError:
        raise _ChangedMeanwhile() from None
    if now != old_text:
        raise _ChangedMeanwhile()


def _edited(path: Path, old_text: str | None, values: Mapping[str, Any]) -> str | None:
    """The file's new text with ``values`` set, or None when nothing changes."""
    import tomlkit
    from tomlkit.exceptions import TOMLKitError

    try:
        if old_text is not None:
            tomllib.loads(old_text)
        doc = tomlkit.parse(old_text if old_text is not None else _HEADER)
    except tomllib.TOMLDecodeError as err:
        outcome = "fix it in an editor first; the file was not changed"
        raise InvalidInput(str(toml_error(path, err, outcome))) from err
    except TOMLKitError as err:  # tomlkit stricter than tomllib: unlikely
        raise InvalidInput(f"{path}: {err}; fix it in an editor; the file was not changed") from err
    except (ValueError, RecursionError) as err:  # past the parser's own limits
        raise InvalidInput(
            f"cannot read {path}: {too_deep(err)}: fix it in an editor first; the file was not"
            " changed"
        ) from err

    order = {key: i for i, key in enumerate(SPECS)}
    keys = sorted(values, key=lambda k: order.get(k, len(order)))
    try:
        for key in keys:
            section, name = key.split(".", 1)
            _apply(doc, section, name, values[key], tomlkit)
    except (ValueError, TOMLKitError) as err:  # a layout tomlkit cannot edit
        raise InvalidInput(
            f"cannot save {', '.join(keys)} into {path} as it is laid out ({err}); set it there"
            " in an editor; the file was not changed"
        ) from err
    new_text = tomlkit.dumps(doc)
    if new_text == old_text or (old_text is None and new_text == _HEADER):
        return None  # e.g. unsetting keys of a file that does not exist
    tomllib.loads(new_text)  # never write a file we could not read back
    size = len(new_text.encode("utf-8"))
    if size > MAX_CONFIG_BYTES:  # no reader would take it: every later save was refused
        raise InvalidInput(
            f"{', '.join(keys)}: too long: {path} would be {size:,} bytes and settings are"
            f" read only up to {MAX_CONFIG_BYTES:,}; give a shorter value; the file was not"
            " changed"
        )
    return new_text


def _not_written(err: OSError, path: Path) -> NaviError:
    """One line for a save the OS refused (the temp file is gone, the file unchanged): the
    daemon answered a full disk with "internal error in settings.set: OSError"."""
    return os_refusal(err, path, "the settings were not changed", ", then save again")


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
        if "keymap" not in ui or not isinstance(ui["keymap"], Mapping):
            ui["keymap"] = _table_in(ui, tomlkit)
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
        ui["keymap"] = _table_in(ui, tomlkit)
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


def _table_in(parent: Any, tomlkit: Any) -> Any:
    """A new table to put in ``parent``: inline inside an inline one (``ui = {theme = "x"}``),
    where tomlkit refuses a ``[table]``."""
    from tomlkit.items import InlineTable

    return tomlkit.inline_table() if isinstance(parent, InlineTable) else tomlkit.table()


def _same(old: Any, new: Any) -> bool:
    return old == new and isinstance(old, bool) == isinstance(new, bool)


def _unwrap(item: Any) -> Any:
    return item.unwrap() if hasattr(item, "unwrap") else item
