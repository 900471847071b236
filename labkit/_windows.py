"""Windows: a Job Object that kills its processes when the last handle to it closes; private files.

Windows has no parent-death signal. A job created with ``JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE``
whose only handle this process holds is closed by Windows when this process ends, however it
ends (a kernel killed from Jupyter included), and every process in the job is then killed.

Windows has no file modes either: a file takes its folder's inherited access list, which for a
folder under ``C:\\`` lets every local user read it. A private file or folder gets an access
list of its own (:func:`make_private`): full control for the user and for SYSTEM, nothing
inherited. SYSTEM because Windows itself (backup, indexing, antivirus) runs as SYSTEM and holds
privileges that pass any access list anyway, as the user's own profile folder grants it;
Administrators are left out, so that another administrator of the machine reads the server's
password only by taking the file over first, which changes its owner for all to see.

Only ctypes, kernel32 and advapi32: no pywin32.
"""

from __future__ import annotations

import ctypes
import re
import sys
from ctypes import wintypes
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from .errors import LabkitError

JOB_OBJECT_EXTENDED_LIMIT_INFORMATION_CLASS = 9
JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE = 0x2000
PROCESS_SET_QUOTA = 0x0100
PROCESS_TERMINATE = 0x0001


class _BasicLimits(ctypes.Structure):
    _fields_ = [
        ("PerProcessUserTimeLimit", ctypes.c_int64),
        ("PerJobUserTimeLimit", ctypes.c_int64),
        ("LimitFlags", wintypes.DWORD),
        ("MinimumWorkingSetSize", ctypes.c_size_t),
        ("MaximumWorkingSetSize", ctypes.c_size_t),
        ("ActiveProcessLimit", wintypes.DWORD),
        ("Affinity", ctypes.c_size_t),
        ("PriorityClass", wintypes.DWORD),
        ("SchedulingClass", wintypes.DWORD),
    ]


class _IoCounters(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in (
        "ReadOperationCount", "WriteOperationCount", "OtherOperationCount",
        "ReadTransferCount", "WriteTransferCount", "OtherTransferCount")]


class _ExtendedLimits(ctypes.Structure):
    _fields_ = [
        ("BasicLimitInformation", _BasicLimits),
        ("IoInfo", _IoCounters),
        ("ProcessMemoryLimit", ctypes.c_size_t),
        ("JobMemoryLimit", ctypes.c_size_t),
        ("PeakProcessMemoryUsed", ctypes.c_size_t),
        ("PeakJobMemoryUsed", ctypes.c_size_t),
    ]


@cache
def _kernel32():
    if sys.platform != "win32":  # importable everywhere (doctests collect every module); used on Windows only
        raise OSError("kernel32 exists on Windows only")
    kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)
    kernel32.CreateJobObjectW.argtypes = [ctypes.c_void_p, wintypes.LPCWSTR]
    kernel32.CreateJobObjectW.restype = wintypes.HANDLE
    kernel32.SetInformationJobObject.argtypes = [wintypes.HANDLE, ctypes.c_int, ctypes.c_void_p, wintypes.DWORD]
    kernel32.SetInformationJobObject.restype = wintypes.BOOL
    kernel32.OpenProcess.argtypes = [wintypes.DWORD, wintypes.BOOL, wintypes.DWORD]
    kernel32.OpenProcess.restype = wintypes.HANDLE
    kernel32.AssignProcessToJobObject.argtypes = [wintypes.HANDLE, wintypes.HANDLE]
    kernel32.AssignProcessToJobObject.restype = wintypes.BOOL
    kernel32.CloseHandle.argtypes = [wintypes.HANDLE]
    kernel32.CloseHandle.restype = wintypes.BOOL
    kernel32.GetCurrentProcess.argtypes = []
    kernel32.GetCurrentProcess.restype = wintypes.HANDLE
    kernel32.LocalFree.argtypes = [ctypes.c_void_p]
    kernel32.LocalFree.restype = ctypes.c_void_p
    return kernel32


class Job:
    """One kill-on-close job for the life of this process (its handle is never closed by us)."""

    def __init__(self):
        self.kernel32 = _kernel32()
        self.handle = self.kernel32.CreateJobObjectW(None, None)
        if not self.handle:
            raise _last_error()
        limits = _ExtendedLimits()
        limits.BasicLimitInformation.LimitFlags = JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE
        if not self.kernel32.SetInformationJobObject(self.handle, JOB_OBJECT_EXTENDED_LIMIT_INFORMATION_CLASS,
                                                     ctypes.byref(limits), ctypes.sizeof(limits)):
            raise _last_error()

    def assign(self, pid: int) -> None:
        """Put process ``pid`` in the job."""
        process = self.kernel32.OpenProcess(PROCESS_SET_QUOTA | PROCESS_TERMINATE, False, pid)
        if not process:
            raise _last_error()
        try:
            if not self.kernel32.AssignProcessToJobObject(self.handle, process):
                raise _last_error()
        finally:
            self.kernel32.CloseHandle(process)


def _last_error() -> OSError:
    """The error Windows recorded for the last kernel32 call."""
    if sys.platform != "win32":
        raise OSError("kernel32 exists on Windows only")
    return ctypes.WinError(ctypes.get_last_error())


@cache
def kill_on_close_job() -> Job:
    """This process's job (made on first use)."""
    return Job()


# -- private files: an access list of their own

FILE_ALL_ACCESS = 0x1F01FF
SYSTEM_SID = "S-1-5-18"
SE_FILE_OBJECT = 1
DACL_SECURITY_INFORMATION = 0x4
PROTECTED_DACL_SECURITY_INFORMATION = 0x80000000
SDDL_REVISION_1 = 1
TOKEN_QUERY = 0x8
TOKEN_USER = 1

# SDDL's names for well-known accounts (Windows writes these instead of the SID)
_ALIASES = {"SY": SYSTEM_SID, "BA": "S-1-5-32-544", "BU": "S-1-5-32-545", "BG": "S-1-5-32-546", "PU": "S-1-5-32-547",
            "AU": "S-1-5-11", "WD": "S-1-1-0", "IU": "S-1-5-4", "NU": "S-1-5-2", "AN": "S-1-5-7", "LS": "S-1-5-19",
            "NS": "S-1-5-20", "CO": "S-1-3-0", "CG": "S-1-3-1", "OW": "S-1-3-4", "RC": "S-1-5-12", "WR": "S-1-5-33",
            "AC": "S-1-15-2-1", "RD": "S-1-5-32-555", "PS": "S-1-5-10"}
_DOMAIN_ALIASES = {"LA": 500, "LG": 501}  # the machine's own administrator and guest accounts
# SDDL's names for access rights (winnt.h)
_RIGHTS = {"GA": 0x10000000, "GR": 0x80000000, "GW": 0x40000000, "GX": 0x20000000, "RC": 0x20000, "SD": 0x10000,
           "WD": 0x40000, "WO": 0x80000, "CC": 0x1, "DC": 0x2, "LC": 0x4, "SW": 0x8, "RP": 0x10, "WP": 0x20,
           "DT": 0x40, "LO": 0x80, "CR": 0x100, "FA": FILE_ALL_ACCESS, "FR": 0x120089, "FW": 0x120116,
           "FX": 0x1200A0, "KA": 0xF003F, "KR": 0x20019, "KW": 0x20006, "KX": 0x20019}


@dataclass(frozen=True)
class Ace:
    """One entry of an access list: allow (``A``) or deny (``D``) ``rights`` to ``sid``, with inheritance ``flags``."""

    kind: str
    flags: frozenset[str]
    rights: int
    sid: str


@dataclass(frozen=True)
class Dacl:
    """An access list: its entries, and whether it is protected (its own, taking nothing from its folder)."""

    protected: bool
    aces: frozenset[Ace]


def owner_only_sddl(user_sid: str, *, folder: bool) -> str:
    """The access list of a private file or folder, in SDDL: full control for the user and SYSTEM, nothing inherited.

    A folder's entries are inherited by what is made in it (``OICI``).

    >>> owner_only_sddl("S-1-5-21-1-2-3-1001", folder=True)
    'D:P(A;OICI;FA;;;S-1-5-21-1-2-3-1001)(A;OICI;FA;;;SY)'
    """
    inherit = "OICI" if folder else ""
    return f"D:P(A;{inherit};FA;;;{user_sid})(A;{inherit};FA;;;SY)"


def parse_dacl(sddl: str, user_sid: str) -> Dacl:
    """An access list as Windows writes it in SDDL, with every account as a SID and every right as a number.

    >>> dacl = parse_dacl("D:AI(A;OICIID;FA;;;SY)(A;ID;0x1200a9;;;BU)", "S-1-5-21-1-2-3-1001")
    >>> dacl.protected, sorted((ace.sid, hex(ace.rights)) for ace in dacl.aces)
    (False, [('S-1-5-18', '0x1f01ff'), ('S-1-5-32-545', '0x1200a9')])
    """
    match = re.search(r"D:([A-Z_]*)", sddl)
    if match is None:
        return Dacl(False, frozenset())
    aces, depth, start = [], 0, 0
    for index in range(match.end(), len(sddl)):  # entries in parentheses (a conditional one nests more)
        if sddl[index] == "(":
            depth += 1
            start = index + 1 if depth == 1 else start
        elif sddl[index] == ")":
            depth -= 1
            if depth == 0:
                aces.append(_ace(sddl[start:index], user_sid))
        elif depth == 0 and sddl[index] == ":":
            break  # the next part (S: for a system list): not the access list
    return Dacl("P" in match.group(1).replace("NO_ACCESS_CONTROL", ""), frozenset(aces))


def _ace(text: str, user_sid: str) -> Ace:
    kind, flags, rights, _, _, sid = text.split(";")[:6]
    mask = int(rights, 16) if rights.lower().startswith("0x") else 0
    if not rights.lower().startswith("0x"):
        for code in (rights[i:i + 2] for i in range(0, len(rights), 2)):
            mask |= _RIGHTS.get(code, 0)
    if sid in _DOMAIN_ALIASES:
        sid = f"{user_sid.rsplit('-', 1)[0]}-{_DOMAIN_ALIASES[sid]}"
    return Ace(kind, frozenset(flags[i:i + 2] for i in range(0, len(flags), 2)), mask, _ALIASES.get(sid, sid))


class Security:
    """The Windows calls behind private files (advapi32): the user's SID, and a path's access list read and written.

    Tests replace it (:func:`security`) to check the logic on every OS.
    """

    def __init__(self):
        self._user: str | None = None

    def user_sid(self) -> str:
        """This process's user, as a SID string (S-1-5-21-...)."""
        if self._user is None:
            self._user = self._token_user()
        return self._user

    def _token_user(self) -> str:
        advapi32, kernel32 = _advapi32(), _kernel32()
        token = wintypes.HANDLE()
        if not advapi32.OpenProcessToken(kernel32.GetCurrentProcess(), TOKEN_QUERY, ctypes.byref(token)):
            raise _last_error()
        try:
            size = wintypes.DWORD()
            advapi32.GetTokenInformation(token, TOKEN_USER, None, 0, ctypes.byref(size))  # asks only how big it is
            buffer = ctypes.create_string_buffer(size.value)
            if not advapi32.GetTokenInformation(token, TOKEN_USER, buffer, size, ctypes.byref(size)):
                raise _last_error()
        finally:
            kernel32.CloseHandle(token)
        sid = ctypes.cast(buffer, ctypes.POINTER(ctypes.c_void_p))[0]  # TOKEN_USER starts with the SID's address
        text = ctypes.c_void_p()
        if not advapi32.ConvertSidToStringSidW(sid, ctypes.byref(text)):
            raise _last_error()
        return _local_string(text)

    def read(self, path: Path) -> str:
        """``path``'s access list, in SDDL."""
        advapi32, kernel32 = _advapi32(), _kernel32()
        dacl, descriptor = ctypes.c_void_p(), ctypes.c_void_p()
        error = advapi32.GetNamedSecurityInfoW(str(path), SE_FILE_OBJECT, DACL_SECURITY_INFORMATION, None, None,
                                               ctypes.byref(dacl), None, ctypes.byref(descriptor))
        if error:
            raise _error(error, path)
        try:
            text = ctypes.c_void_p()
            if not advapi32.ConvertSecurityDescriptorToStringSecurityDescriptorW(
                    descriptor, SDDL_REVISION_1, DACL_SECURITY_INFORMATION, ctypes.byref(text), None):
                raise _last_error()
            return _local_string(text)
        finally:
            kernel32.LocalFree(descriptor)

    def write(self, path: Path, sddl: str) -> None:
        """Give ``path`` the access list ``sddl`` (protected: it then takes nothing from its folder)."""
        advapi32, kernel32 = _advapi32(), _kernel32()
        descriptor = ctypes.c_void_p()
        if not advapi32.ConvertStringSecurityDescriptorToSecurityDescriptorW(sddl, SDDL_REVISION_1,
                                                                             ctypes.byref(descriptor), None):
            raise _last_error()
        try:
            present, defaulted, dacl = wintypes.BOOL(), wintypes.BOOL(), ctypes.c_void_p()
            if not advapi32.GetSecurityDescriptorDacl(descriptor, ctypes.byref(present), ctypes.byref(dacl),
                                                      ctypes.byref(defaulted)):
                raise _last_error()
            error = advapi32.SetNamedSecurityInfoW(str(path), SE_FILE_OBJECT, DACL_SECURITY_INFORMATION
                                                   | PROTECTED_DACL_SECURITY_INFORMATION, None, None, dacl, None)
            if error:
                raise _error(error, path)
        finally:
            kernel32.LocalFree(descriptor)


@cache
def security() -> Security:
    """The calls :func:`make_private` makes (one object per process)."""
    return Security()


def make_private(path: Path, *, folder: bool) -> None:
    """Give ``path`` an access list of its own for the user and SYSTEM (see the module's note); once: kept after.

    A folder's list is inherited by what is made in it afterwards (a private folder is made
    private before its files are written); setting it also passes it on to what is in it already.
    Where the drive keeps no access list (FAT, exFAT), the path cannot be private: refused.
    """
    calls = security()
    user = calls.user_sid()
    sddl = owner_only_sddl(user, folder=folder)
    wanted = parse_dacl(sddl, user)
    try:
        if parse_dacl(calls.read(path), user) == wanted:
            return
        calls.write(path, sddl)
        after = parse_dacl(calls.read(path), user)
        if after == wanted:
            return
        problem = "" if after.protected else " (its drive keeps no access lists: FAT or exFAT, say)"
    except OSError as error:
        problem = f" ({error.strerror or error})"
    raise LabkitError(f"labkit could not make {path} readable by you alone{problem}: set LABKIT_HOME to a folder on "
                      "an NTFS drive of this computer (e.g. C:\\labkit).")


# Rights that let an account add, remove or rename what is in a folder, or change who may (winnt.h).
_WRITE_RIGHTS = (0x2 | 0x4 | 0x40 | 0x10000 | 0x40000 | 0x80000  # add file, add folder, delete child, delete, DAC, owner
                 | 0x10000000 | 0x40000000)  # generic all, generic write
_TRUSTED = {SYSTEM_SID, "S-1-5-32-544", "S-1-3-0"}  # SYSTEM, Administrators, the creator (stands for the owner)


def others_who_may_write(path: Path) -> list[str]:
    """The accounts (SIDs) other than this user, SYSTEM and the administrators that may add files in ``path``.

    Entries that only pass on to what is made inside (``IO``) are not the folder's own.
    """
    calls = security()
    user = calls.user_sid()
    dacl = parse_dacl(calls.read(path), user)
    return sorted({ace.sid for ace in dacl.aces if ace.kind == "A" and "IO" not in ace.flags
                   and ace.rights & _WRITE_RIGHTS and ace.sid not in _TRUSTED | {user}})


@cache
def _advapi32():
    if sys.platform != "win32":  # importable everywhere (doctests collect every module); used on Windows only
        raise OSError("advapi32 exists on Windows only")
    advapi32 = ctypes.WinDLL("advapi32", use_last_error=True)
    pointer = ctypes.POINTER(ctypes.c_void_p)
    advapi32.OpenProcessToken.argtypes = [wintypes.HANDLE, wintypes.DWORD, ctypes.POINTER(wintypes.HANDLE)]
    advapi32.OpenProcessToken.restype = wintypes.BOOL
    advapi32.GetTokenInformation.argtypes = [wintypes.HANDLE, ctypes.c_int, ctypes.c_void_p, wintypes.DWORD,
                                             ctypes.POINTER(wintypes.DWORD)]
    advapi32.GetTokenInformation.restype = wintypes.BOOL
    advapi32.ConvertSidToStringSidW.argtypes = [ctypes.c_void_p, pointer]
    advapi32.ConvertSidToStringSidW.restype = wintypes.BOOL
    advapi32.GetNamedSecurityInfoW.argtypes = [wintypes.LPCWSTR, ctypes.c_int, wintypes.DWORD, pointer, pointer,
                                               pointer, pointer, pointer]
    advapi32.GetNamedSecurityInfoW.restype = wintypes.DWORD
    advapi32.SetNamedSecurityInfoW.argtypes = [wintypes.LPWSTR, ctypes.c_int, wintypes.DWORD, ctypes.c_void_p,
                                               ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    advapi32.SetNamedSecurityInfoW.restype = wintypes.DWORD
    advapi32.ConvertSecurityDescriptorToStringSecurityDescriptorW.argtypes = [
        ctypes.c_void_p, wintypes.DWORD, wintypes.DWORD, pointer, ctypes.POINTER(wintypes.ULONG)]
    advapi32.ConvertSecurityDescriptorToStringSecurityDescriptorW.restype = wintypes.BOOL
    advapi32.ConvertStringSecurityDescriptorToSecurityDescriptorW.argtypes = [
        wintypes.LPCWSTR, wintypes.DWORD, pointer, ctypes.POINTER(wintypes.ULONG)]
    advapi32.ConvertStringSecurityDescriptorToSecurityDescriptorW.restype = wintypes.BOOL
    advapi32.GetSecurityDescriptorDacl.argtypes = [ctypes.c_void_p, ctypes.POINTER(wintypes.BOOL), pointer,
                                                   ctypes.POINTER(wintypes.BOOL)]
    advapi32.GetSecurityDescriptorDacl.restype = wintypes.BOOL
    return advapi32


def _local_string(text: ctypes.c_void_p) -> str:
    """A string that a Windows call allocated (LocalAlloc), read and then freed."""
    address = text.value
    try:
        return ctypes.wstring_at(address) if address else ""
    finally:
        _kernel32().LocalFree(text)


def _error(code: int, path: Path) -> OSError:
    """The error a security call returned (they return it rather than set the last error)."""
    if sys.platform != "win32":
        raise OSError("advapi32 exists on Windows only")
    return OSError(None, ctypes.FormatError(code), str(path), code)
