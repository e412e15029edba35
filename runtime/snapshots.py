"""Snapshots of an instance's private volume: compressed (zstandard), then encrypted (AES-256-GCM) under a
key per owner that never enters a sandbox, stored with owner, generation and a digest.

The authenticated header (owner, instance, generation, snapshot id) is the AEAD's associated data, so a
snapshot cannot be passed off as someone else's or another instance's. Restore goes only into an instance
of the same owner; it decrypts and unpacks into a fresh folder first and swaps it in only when all of it
is good, so a corrupt or truncated snapshot changes nothing. The controller then recreates the instance,
so the restored one runs under a new generation.

The volume is the instance's and so hostile input to the root process that packs it (``pack``): it is walked by
descriptor (``runtime.walk``, every name opened relative to its folder's descriptor with ``O_NOFOLLOW``, a file
packed only if what was opened is the regular file the listing named), so a folder swapped for a symlink
mid-walk leads nowhere outside the volume; symbolic links are kept as links, never followed; fifos, sockets
and devices are left out, and so is anything the instance's uid does not own (a hard link to a file of
someone else's); and the regular files' sizes together may not pass the store's byte budget (a sparse file
of a terabyte is refused before a byte of it is read, not inflated in the platform's memory).

How the compressed bytes are sealed is the store's ``sealer``, chosen when the store is made (AES-256-GCM,
``AesGcmSealer``, by default) and swapped for the length of a block with ``sealed_with``: the seam a driver
uses to show what a store without encryption would leave at rest. The runtime itself never installs another.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import secrets
import stat
import tarfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from runtime.errors import RuntimeFault
from runtime.walk import MAX_DEPTH, TooDeep, remove_quietly, walk

log = logging.getLogger("pairproof.snapshots")

MAGIC = b"PPSNAP1\n"


class Sealer(Protocol):
    """Seals a snapshot's compressed bytes under the owner's key, bound to the header (``aad``)."""

    def seal(self, key: bytes, plain: bytes, aad: bytes) -> bytes: ...

    def open(self, key: bytes, sealed: bytes, aad: bytes) -> bytes:
        """The plain bytes; ``ValueError`` if they are not authentic under ``key`` and ``aad``."""


class AesGcmSealer:
    """AES-256-GCM with a fresh 96-bit nonce in front of the ciphertext."""

    def seal(self, key: bytes, plain: bytes, aad: bytes) -> bytes:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        nonce = secrets.token_bytes(12)
        return nonce + AESGCM(key).encrypt(nonce, plain, aad)

    def open(self, key: bytes, sealed: bytes, aad: bytes) -> bytes:
        from cryptography.exceptions import InvalidTag
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        try:
            return AESGCM(key).decrypt(sealed[:12], sealed[12:], aad)
        except InvalidTag as exc:
            raise ValueError("the snapshot does not authenticate under its owner's key") from exc


class SnapshotError(RuntimeFault):
    """A snapshot was refused (not the owner's, corrupt, truncated); ``reason`` is machine-readable."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class SnapshotRef:
    id: str
    org: str
    user: str
    instance: str
    generation: int
    path: Path
    digest: str


# What one snapshot may hold: the regular files' apparent sizes together (the tar is built in memory, then
# compressed and sealed). Far above an instance's volume; a volume past it is refused, never read.
BUDGET = 256 * 1024 * 1024
ENTRY_COST = 1536  # what one entry costs the archive at most beside its name: its header and a PAX header
_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


def _info(arcname: str, st: os.stat_result, kind: bytes) -> tarfile.TarInfo:
    info = tarfile.TarInfo(arcname)
    info.type, info.mode, info.mtime = kind, stat.S_IMODE(st.st_mode) & 0o777, int(st.st_mtime)
    info.uid, info.gid = st.st_uid, st.st_gid
    return info


def pack(volume: Path, *, uid: int | None, budget: int = BUDGET) -> tuple[bytes, list[str]]:
    """The volume as a tar (in memory, at most ``budget`` bytes of file content), and what was left out and why.
    Walked by descriptor, links kept as links, only what ``uid`` owns (None: anyone's); see the module's text."""
    buffer, left_out, total = io.BytesIO(), [], 0
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        top = os.open(volume, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            tar.addfile(_info(".", os.fstat(top), tarfile.DIRTYPE))
        finally:
            os.close(top)
        for folder, dirs, files, dfd in walk(volume, onerror=_walk_error):
            rel = os.path.relpath(folder, volume)
            base = "." if rel == "." else "./" + rel
            here = os.fstat(dfd)
            if uid is not None and rel != "." and here.st_uid != uid:
                # The folder the walk opened is judged, not the one stat'd by name a moment before (a folder of
                # another owner's exchanged with one of the instance's, in between, would pass that check).
                left_out.append(f"{base}: owned by uid {here.st_uid}, not the instance's (changed while listed)")
                dirs.clear()
                continue
            for name in sorted(dirs + files):
                arcname = f"{base}/{name}"
                try:
                    st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                except FileNotFoundError:
                    continue  # gone meanwhile
                # Every entry costs the archive a header (and a long name or link target more): counted
                # against the budget too, or a tree of empty files and long names would pass it.
                total += ENTRY_COST + len(arcname.encode(errors="surrogateescape"))
                if total > budget:
                    raise SnapshotError("too_large", f"the volume's entries pass the snapshot budget of {budget} "
                                                     f"bytes (at {arcname}); nothing was kept")
                if uid is not None and st.st_uid != uid:
                    left_out.append(f"{arcname}: owned by uid {st.st_uid}, not the instance's")
                    if stat.S_ISDIR(st.st_mode):
                        dirs.remove(name)  # nor anything under it
                    continue
                if stat.S_ISDIR(st.st_mode):
                    tar.addfile(_info(arcname, st, tarfile.DIRTYPE))
                elif stat.S_ISLNK(st.st_mode):
                    info = _info(arcname, st, tarfile.SYMTYPE)
                    try:
                        info.linkname = os.readlink(name, dir_fd=dfd)
                    except OSError as exc:  # swapped for something else since it was listed
                        raise SnapshotError("changed", f"{arcname} changed while the snapshot was taken "
                                                       f"({exc.strerror}); take it again") from None
                    total += len(info.linkname.encode(errors="surrogateescape"))
                    tar.addfile(info)
                elif stat.S_ISREG(st.st_mode):
                    total += _pack_file(tar, dfd, name, arcname, st, budget - total, budget)
                else:
                    left_out.append(f"{arcname}: not a regular file, folder or link (mode {st.st_mode:o})")
    return buffer.getvalue(), left_out


def _walk_error(error: OSError) -> None:
    """A folder the walk listed but could not open or list (swapped for a link or another folder, gone meanwhile):
    never left out in silence."""
    if isinstance(error, FileNotFoundError):
        return  # gone meanwhile: nothing of it to keep
    if isinstance(error, TooDeep):
        raise SnapshotError("too_deep", f"the volume's folders nest deeper than {MAX_DEPTH} ({error.filename}); "
                                        "nothing was kept")
    raise SnapshotError("changed", f"{error.filename or 'a folder'} could not be walked while the snapshot was taken "
                                   f"({error.strerror}); take it again")


def _pack_file(tar: tarfile.TarFile, dfd: int, name: str, arcname: str, listed: os.stat_result, room: int,
               budget: int) -> int:
    """One regular file, opened relative to its folder with O_NOFOLLOW and packed only if it is still the file
    the listing named; its size counted against ``room`` before anything is read. The bytes packed."""
    try:
        fd = os.open(name, _OPEN_FLAGS, dir_fd=dfd)
    except FileNotFoundError:
        return 0
    except OSError as exc:  # ELOOP: swapped for a link since it was listed
        raise SnapshotError("changed", f"{arcname} changed while the snapshot was taken ({exc.strerror}); "
                                       "take it again") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (listed.st_dev, listed.st_ino):
            raise SnapshotError("changed", f"{arcname} changed while the snapshot was taken; take it again")
        if st.st_size > room:
            raise SnapshotError("too_large", f"the volume holds more than the snapshot budget of {budget} bytes "
                                             f"of file content (at {arcname}, {st.st_size} bytes); nothing was read")
        info = _info(arcname, st, tarfile.REGTYPE)
        info.size = st.st_size
        try:
            tar.addfile(info, f)
        except OSError as exc:  # shorter than it said: cut while it was read
            raise SnapshotError("changed", f"{arcname} changed while the snapshot was taken ({exc}); "
                                           "take it again") from None
        return st.st_size


def _restore_filter(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo:
    """tarfile's ``data`` filter, but a symbolic link is restored whatever it names (an absolute link, or one
    above the volume: ``python -> /usr/bin/python3`` in a venv is the sandbox's to resolve in its own view; the
    ``data`` filter refused it, and a parked volume could then never come back). Nothing is extracted through a
    link: every member's own path is still checked to stay inside the destination."""
    if member.issym():
        checked = tarfile.data_filter(member.replace(linkname=".", deep=False), dest)
        return checked.replace(linkname=member.linkname, deep=False)
    return tarfile.data_filter(member, dest)


class SnapshotStore:
    def __init__(self, state: Path, sealer: Sealer | None = None) -> None:
        self.sealer: Sealer = sealer or AesGcmSealer()
        self.dir = state / "snapshots"
        self.keys = state / "snapshot-keys"
        for d in (self.dir, self.keys):
            d.mkdir(parents=True, exist_ok=True)
            os.chmod(d, 0o700)

    def path(self, snap_id: str) -> Path:
        """Where snapshot ``snap_id`` is stored (whether or not it exists)."""
        if not snap_id.isalnum():
            raise SnapshotError("not_found", f"no snapshot {snap_id!r}")
        return self.dir / f"{snap_id}.snap"

    @contextmanager
    def sealed_with(self, sealer: Sealer) -> Iterator[None]:
        """Seal and open with ``sealer`` while the block runs (a store moving to another sealer), then with
        the one it had again."""
        before, self.sealer = self.sealer, sealer
        try:
            yield
        finally:
            self.sealer = before

    def _key(self, org: str, user: str) -> bytes:
        path = self.keys / f"{org}-{user}.key"
        if not path.exists():
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(secrets.token_bytes(32))
        return path.read_bytes()

    def take(self, volume: Path, *, org: str, user: str, instance: str, generation: int,
             uid: int | None = None, budget: int = BUDGET) -> SnapshotRef:
        """Seal ``volume`` (packed by ``pack``: only what ``uid`` owns, at most ``budget`` bytes of files)."""
        import zstandard

        packed, left_out = pack(volume, uid=uid, budget=budget)
        if left_out:
            log.warning("snapshot of %s left out %d entries: %s", instance, len(left_out), "; ".join(left_out[:5]))
        compressed = zstandard.ZstdCompressor(level=3).compress(packed)
        snap_id = secrets.token_hex(8)
        header = {"id": snap_id, "org": org, "user": user, "instance": instance, "generation": generation,
                  "at": time.time()}
        aad = json.dumps(header, sort_keys=True).encode()
        sealed = self.sealer.seal(self._key(org, user), compressed, aad)
        blob = MAGIC + len(aad).to_bytes(4, "big") + aad + sealed
        path = self.dir / f"{snap_id}.snap"
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(blob)
        tmp.replace(path)
        return SnapshotRef(snap_id, org, user, instance, generation, path, hashlib.sha256(blob).hexdigest())

    def list(self, org: str, user: str) -> list[SnapshotRef]:
        found = []
        for path in sorted(self.dir.glob("*.snap")):
            try:
                ref = self._read_header(path)
            except (ValueError, KeyError):
                continue  # a damaged file lists as nothing; restoring it says why
            if ref and (ref.org, ref.user) == (org, user):
                found.append(ref)
        return found

    def _read_header(self, path: Path) -> SnapshotRef | None:
        blob = path.read_bytes()
        if not blob.startswith(MAGIC):
            return None
        size = int.from_bytes(blob[len(MAGIC):len(MAGIC) + 4], "big")
        header = json.loads(blob[len(MAGIC) + 4:len(MAGIC) + 4 + size])
        return SnapshotRef(header["id"], header["org"], header["user"], header["instance"], header["generation"], path,
                           hashlib.sha256(blob).hexdigest())

    def restore(self, snap_id: str, *, org: str, user: str, volume: Path, uid: int,
                make: Callable[[Path], None] | None = None) -> None:
        """Replace ``volume`` with the snapshot's content, if (org, user) owns it and it is intact. ``make`` creates
        the staging folder it is extracted into (the controller's: a size-limited volume, ``quota.py``); by
        default a plain folder. A snapshot that does not fit in it is refused and nothing is restored."""
        import zstandard

        path = self.dir / f"{snap_id}.snap"
        if not path.exists() or not snap_id.isalnum():
            raise SnapshotError("not_found", f"no snapshot {snap_id!r}")
        blob = path.read_bytes()
        try:
            ref = self._read_header(path)
        except (ValueError, KeyError) as exc:
            raise SnapshotError("corrupt", f"snapshot {snap_id} has a damaged header: {exc}") from exc
        if ref is None:
            raise SnapshotError("corrupt", f"snapshot {snap_id} is not a pairproof snapshot")
        if (ref.org, ref.user) != (org, user):
            # Same answer as absent: a snapshot id must not tell a stranger it exists.
            raise SnapshotError("not_found", f"no snapshot {snap_id!r}")
        size = int.from_bytes(blob[len(MAGIC):len(MAGIC) + 4], "big")
        aad = blob[len(MAGIC) + 4:len(MAGIC) + 4 + size]
        rest = blob[len(MAGIC) + 4 + size:]
        try:
            compressed = self.sealer.open(self._key(org, user), rest, aad)
            raw = zstandard.ZstdDecompressor().decompress(compressed)
        except (ValueError, zstandard.ZstdError) as exc:
            raise SnapshotError("corrupt", f"snapshot {snap_id} does not decrypt or decompress: it is corrupt or "
                                           "truncated; nothing was restored") from exc
        staging = volume.with_name(volume.name + ".restoring")
        remove_quietly(staging, log)
        if make is None:
            staging.mkdir(mode=0o700)
        else:
            make(staging)
        with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
            try:
                tar.extractall(staging, filter=_restore_filter)
            except tarfile.FilterError as exc:
                remove_quietly(staging, log)
                raise SnapshotError("corrupt", f"snapshot {snap_id} holds what no volume may ({exc}); nothing was "
                                               "restored") from exc
            except OSError as exc:
                remove_quietly(staging, log)
                raise SnapshotError("too_large", f"snapshot {snap_id} does not fit in the volume ({exc.strerror}); "
                                                 "nothing was restored") from exc
        for _folder, dirs, files, dfd in walk(staging, onerror=_walk_error):
            os.chown(dfd, uid, uid)
            for name in dirs + files:
                os.chown(name, uid, uid, dir_fd=dfd, follow_symlinks=False)
        old = volume.with_name(volume.name + ".old")
        remove_quietly(old, log)
        volume.rename(old)
        staging.rename(volume)
        remove_quietly(old, log)
