"""Where the shipped data are: ``$ET_GRAPH_DATA``, or the source checkout's ``datasets/``.

An editable install (``pip install -e .``) runs from the checkout, whose ``datasets/`` folder
holds the embedded graphs. A wheel ships no data, and its parent folder is ``site-packages``,
whose ``datasets/`` may be another package's (HuggingFace ``datasets``): the checkout counts only
when ``setup.py`` sits beside the package.
"""
from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path
from typing import Optional

#: The folder of the ``et_graph`` package.
PACKAGE_DIR = Path(__file__).resolve().parent

#: What a user of a wheel without the data is told.
NO_DATA_HINT = ("et_graph is installed without its source checkout (a wheel ships no data): set "
                "ET_GRAPH_DATA to a copy of the repository's datasets/ folder")


def cache_dir() -> Path:
    """The user's writable et-graph folder (downloads, the TU cache): ``$ET_GRAPH_CACHE``, else
    ``$XDG_CACHE_HOME/et_graph``, else ``~/.cache/et_graph``."""
    env = os.environ.get("ET_GRAPH_CACHE")
    if env:
        return Path(env).expanduser()  # (callers refuse it unusable: cache_dir_is_chosen)
    base = os.environ.get("XDG_CACHE_HOME")
    if not base:
        try:
            base = str(Path.home() / ".cache")
        except (RuntimeError, KeyError):
            # no home at all (HOME unset and a user id without a passwd entry, as a container
            # may run): Path.home() raised, where an unwritable home fell back (an SRE audit)
            return private_temp_folder("et_graph_cache")
    return Path(base) / "et_graph"


def cache_dir_is_chosen() -> bool:
    """Whether ``$ET_GRAPH_CACHE`` names the cache folder: then an unusable one is an error, not
    a reason to fall back to a private temporary folder (a locked-down runtime audit: a file,
    an unwritable folder or a relative path under a read-only working folder was replaced
    without a word)."""
    return bool(os.environ.get("ET_GRAPH_CACHE"))


def plain_file_mode(path: Path) -> int:
    """The mode a plain write would give ``path``: its own where it exists, else the umask's
    (a temporary file is private, so a file moved into place from one would be too)."""
    if path.exists():
        return stat.S_IMODE(path.stat().st_mode)
    umask = os.umask(0o022)  # (the only portable way to read it: set it, put it back)
    os.umask(umask)
    return 0o666 & ~umask


def write_text_whole(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` whole or not at all: into a new temporary file beside it
    (``.<random>.<name>.partial``), then ``os.replace`` (a run killed, or a full disk, while
    writing left a cut file that later runs read). The temporary name is made afresh by
    ``tempfile.mkstemp``: a fixed one was opened through whatever link another user of a
    shared folder had planted under it (a security audit); a failed write removes it."""
    handle, name = tempfile.mkstemp(prefix=".", suffix=f".{path.name}.partial", dir=path.parent)
    os.close(handle)
    partial = Path(name)
    try:
        mode = plain_file_mode(path)
        # written while its owner may write it, then given the final mode: a read-only file
        # (or a umask without owner-write) to replace failed the write (a review)
        os.chmod(partial, mode | stat.S_IWUSR)
        partial.write_text(text, encoding="utf-8")
        os.chmod(partial, mode)
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return path


WINDOWS = os.name == "nt"


def private_temp_folder(name: str) -> Path:
    """``<tmp>/<name>_<uid>``, made with mode 0700, and refused unless it is a real folder of
    this user that nobody else can write: another user may have made it first, with files
    that et-graph would read."""
    import stat
    import tempfile

    getuid = getattr(os, "getuid", None)
    owner = getuid() if getuid is not None else None
    folder = Path(tempfile.gettempdir()) / (f"{name}_{owner}" if owner is not None else name)
    folder.mkdir(mode=0o700, exist_ok=True)
    info = folder.lstat()
    # Windows reports every writable folder as mode 0o777 (its temp folder is the user's own)
    shared = info.st_mode & 0o022 and not WINDOWS
    if (not stat.S_ISDIR(info.st_mode) or (owner is not None and info.st_uid != owner)
            or shared):
        raise ValueError(f"{folder} is not a private folder of this user (another user's, a "
                         "link, or writable by others): set ET_GRAPH_CACHE or pass --cache")
    return folder


def no_data_hint() -> str:
    """What to do when shipped data are missing: :data:`NO_DATA_HINT`, or, when
    ``ET_GRAPH_DATA`` is set already, that its folder lacks them (the hint to set it misled)."""
    env = os.environ.get("ET_GRAPH_DATA")
    if env:
        return (f"ET_GRAPH_DATA={env} does not hold it: point ET_GRAPH_DATA at a copy of the "
                "repository's datasets/ folder")
    return NO_DATA_HINT


def source_checkout() -> Optional[Path]:
    """The repository root when the package runs from its source checkout, else ``None``."""
    root = PACKAGE_DIR.parent
    return root if (root / "setup.py").is_file() else None


def shipped_data_dir() -> Optional[Path]:
    """``$ET_GRAPH_DATA`` when set (as given, existing or not), else the checkout's
    ``datasets/`` folder when it exists, else ``None``."""
    env = os.environ.get("ET_GRAPH_DATA")
    if env:
        return Path(env).expanduser()
    checkout = source_checkout()
    folder = checkout / "datasets" if checkout else None
    return folder if folder is not None and folder.is_dir() else None


def shipped_path(relative: Path) -> Optional[Path]:
    """A relative path written from the repository root, looked up where the data are:
    ``datasets/X`` under :func:`shipped_data_dir` (so ``$ET_GRAPH_DATA`` serves it), any other
    path under the checkout. ``None`` when neither holds it."""
    parts = relative.parts
    if parts and parts[0] == "datasets":
        data = shipped_data_dir()
        candidate = data.joinpath(*parts[1:]) if data is not None else None
    else:
        checkout = source_checkout()
        candidate = checkout / relative if checkout else None
    return candidate if candidate is not None and candidate.exists() else None
