"""Rules for individual shell commands, by name: what ``rm -rf``, ``dd of=/dev/sda``,
``chmod 777``, ``nc -e`` and the rest are worth.

``CommandRules`` is mixed into the Bash analyser: a rule named ``_rule_<command>``
gets the command's base name and its (unquoted) arguments and adds findings.
"""

from __future__ import annotations

import re
from typing import Any

from approvals.policy.risk.text import is_secret_path, is_system_path, short

ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)

VARIABLE_FINDINGS: dict[str, tuple[int, str]] = {
    "LD_PRELOAD": (6, "sets LD_PRELOAD (injects code into every program)"),
    "LD_LIBRARY_PATH": (5, "sets LD_LIBRARY_PATH (changes which libraries load)"),
    "BASH_ENV": (6, "sets BASH_ENV (runs code in every shell)"),
    "ENV": (4, "sets ENV (runs code in every shell)"),
    "PROMPT_COMMAND": (6, "sets PROMPT_COMMAND (runs code at every prompt)"),
    "PATH": (3, "changes PATH (which program a name runs)"),
    "IFS": (5, "changes IFS (how words split, used to hide commands)"),
    "HISTFILE": (6, "tampers with shell history"),
    "HISTSIZE": (6, "tampers with shell history"),
    "HISTFILESIZE": (6, "tampers with shell history"),
}

_SERVICE_VERBS: dict[str, tuple[int, str]] = {
    "stop": (6, "stops services"),
    "disable": (6, "disables services"),
    "mask": (6, "masks services"),
    "kill": (6, "kills services"),
    "isolate": (7, "switches the system target"),
    "restart": (4, "restarts services"),
    "try-restart": (4, "restarts services"),
    "reload-or-restart": (4, "restarts services"),
    "reload": (3, "reloads services"),
    "start": (3, "starts services"),
    "enable": (4, "enables services at boot"),
    "daemon-reload": (3, "reloads unit files"),
    "edit": (5, "edits unit files"),
    "set-property": (5, "changes unit properties"),
    "poweroff": (8, "shuts down the host"),
    "reboot": (8, "reboots the host"),
    "halt": (8, "halts the host"),
    "kexec": (8, "reboots the host"),
    "suspend": (7, "suspends the host"),
    "hibernate": (7, "suspends the host"),
}


def short_flags(args: list[str]) -> set[str]:
    return {c for a in args if a.startswith("-") and not a.startswith("--") for c in a[1:]}


def operands_of(args: list[str]) -> list[str]:
    return [a for a in args if not a.startswith("-")]


class CommandRules:
    """Per-command rules; the analyser provides ``add``, ``_write_target``, ``_nested``,
    ``_run`` and ``_interpreter``."""

    def add(self, points: int, reason: str) -> None:
        raise NotImplementedError

    def _write_target(self, path: str, how: str) -> None:
        raise NotImplementedError

    def _nested(self, code: str) -> None:
        raise NotImplementedError

    def _run(self, name: str, args: list[str], arg_words: list[Any], wrapped: int) -> None:
        raise NotImplementedError

    def _interpreter(self, base: str, args: list[str]) -> None:
        raise NotImplementedError

    def _rule_rm(self, base: str, args: list[str]) -> None:
        flags = short_flags(args)
        recursive = bool(flags & {"r", "R"}) or "--recursive" in args
        force = "f" in flags or "--force" in args
        targets = operands_of(args)
        if recursive and force:
            self.add(8, "deletes recursively and forcibly (rm -rf)")
        elif recursive:
            self.add(6, "deletes recursively (rm -r)")
        else:
            self.add(4, "deletes files (rm)")
        for target in targets:
            stripped = target.rstrip("/*") or "/"
            if stripped in ("/", "~", "$HOME", "..", ".") or target in ("*", "/*", "~/*"):
                self.add(10, f"deletes everything under {target}")
            elif is_system_path(target) or is_secret_path(target):
                self.add(8, f"deletes a system path ({short(target)})")

    def _rule_dd(self, base: str, args: list[str]) -> None:
        self.add(4, "copies raw data (dd)")
        for arg in args:
            if arg.startswith("of="):
                self._write_target(arg[3:], f"dd {arg}")

    def _rule_shred(self, base: str, args: list[str]) -> None:
        self.add(7, "destroys file contents (shred)")

    def _rule_wipefs(self, base: str, args: list[str]) -> None:
        self.add(9, "erases filesystem signatures (wipefs)")

    def _rule_fdisk(self, base: str, args: list[str]) -> None:
        self.add(8, f"edits partition tables ({base})")

    _rule_sfdisk = _rule_parted = _rule_gdisk = _rule_fdisk

    def _rule_chmod(self, base: str, args: list[str]) -> None:
        modes = operands_of(args)[:1]
        mode = modes[0] if modes else ""
        if re.fullmatch(
            r"0?[0-7]?777|0?666|[ugoa]*o[ugoa]*\+[rwxX]*w[rwxX]*|a\+[rwxX]*w[rwxX]*|\+w", mode
        ):
            self.add(6, f"makes files world-writable (chmod {mode})")
        elif re.fullmatch(r"0?[4267][0-7]{3}|[ugoa]*\+[rwx]*s[rwx]*", mode):
            self.add(7, f"sets setuid or setgid bits (chmod {mode})")
        else:
            self.add(1, "changes file permissions (chmod)")
        self._systemoperands(base, operands_of(args)[1:])

    def _rule_chown(self, base: str, args: list[str]) -> None:
        self.add(4, f"changes file ownership ({base})")
        self._systemoperands(base, operands_of(args)[1:])

    _rule_chgrp = _rule_chown

    def _systemoperands(self, base: str, operands: list[str]) -> None:
        for path in operands:
            if path.rstrip("/*") == "":
                self.add(9, f"changes the whole filesystem ({base} {path})")
            elif is_secret_path(path) or is_system_path(path):
                self._write_target(path, f"{base} {short(path, 40)}")

    def _rule_curl(self, base: str, args: list[str]) -> None:
        self.add(3, f"downloads from the network ({base})")
        uploads = {
            "-d",
            "--data",
            "--data-binary",
            "--data-raw",
            "--data-urlencode",
            "-F",
            "--form",
            "-T",
            "--upload-file",
            "--post-file",
            "--post-data",
            "--body-data",
        }
        if any(a in uploads or a.split("=", 1)[0] in uploads for a in args):
            self.add(5, f"sends data over the network ({base})")
        for i, arg in enumerate(args[:-1]):
            if arg in ("-o", "-O", "--output", "--output-document"):
                self._write_target(args[i + 1], f"{base} {arg} {short(args[i + 1], 30)}")

    _rule_wget = _rule_curl

    def _rule_nc(self, base: str, args: list[str]) -> None:
        flags = short_flags(args)
        if flags & {"e", "c"} or any(
            a.startswith(("--exec", "--sh-exec", "--lua-exec")) for a in args
        ):
            self.add(9, f"{base} runs a program for the network (reverse or bind shell)")
        elif "l" in flags:
            self.add(6, f"listens on a network port ({base} -l)")
        else:
            self.add(5, f"opens a network connection ({base})")

    _rule_ncat = _rule_netcat = _rule_nc

    def _rule_socat(self, base: str, args: list[str]) -> None:
        if any(re.search(r"(?i)\b(?:exec|system):", a) for a in args):
            self.add(9, "socat runs a program for the network (reverse shell)")
        else:
            self.add(5, "relays network connections (socat)")

    def _rule_telnet(self, base: str, args: list[str]) -> None:
        self.add(5, f"opens a remote session ({base})")

    def _rule_ssh(self, base: str, args: list[str]) -> None:
        self.add(4, f"connects to another host ({base})")
        if {"R", "L", "D"} & short_flags(args):
            self.add(5, "opens an SSH tunnel")

    _rule_scp = _rule_sftp = _rule_rsync = _rule_ftp = _rule_ssh

    def _rule_eval(self, base: str, args: list[str]) -> None:
        self.add(6, "evaluates a string as code (eval)")
        if args:
            self._nested(" ".join(args))

    def _rule_source(self, base: str, args: list[str]) -> None:
        self.add(4, f"runs another script in this shell ({base})")

    _rule__ = _rule_source  # "." is the same builtin as source

    def _rule_base64(self, base: str, args: list[str]) -> None:
        if {"d", "D"} & short_flags(args) or "--decode" in args:
            self.add(4, "decodes base64 (can hide a payload)")

    def _rule_xxd(self, base: str, args: list[str]) -> None:
        if "r" in short_flags(args):
            self.add(4, "turns hex back into bytes (xxd -r)")

    def _rule_kill(self, base: str, args: list[str]) -> None:
        if (
            any(a in ("-9", "-KILL", "-SIGKILL", "-s9") for a in args)
            or "KILL" in args
            or "SIGKILL" in args
        ):
            self.add(5, f"kills processes with SIGKILL ({base})")
        else:
            self.add(4, f"signals processes ({base})")
        if base == "kill" and any(a in ("1", "-1") for a in operands_of(args) + args[-1:]):
            self.add(9, "signals init or every process (kill 1 / kill -1)")

    _rule_pkill = _rule_killall = _rule_kill

    def _rule_shutdown(self, base: str, args: list[str]) -> None:
        self.add(8, f"shuts down or reboots the host ({base})")

    _rule_reboot = _rule_halt = _rule_poweroff = _rule_shutdown

    def _rule_init(self, base: str, args: list[str]) -> None:
        if set(args) & {"0", "6", "1", "S"}:
            self.add(8, f"changes the run level ({base} {' '.join(args)})")

    _rule_telinit = _rule_init

    def _rule_systemctl(self, base: str, args: list[str]) -> None:
        verbs = operands_of(args)
        verb = verbs[0] if verbs else ""
        self._service_verb(verb, " ".join(verbs[1:3]), base)

    def _rule_service(self, base: str, args: list[str]) -> None:
        operands = operands_of(args)
        if len(operands) >= 2:
            self._service_verb(operands[1], operands[0], base)

    def _service_verb(self, verb: str, unit: str, base: str) -> None:
        if verb not in _SERVICE_VERBS:
            return
        points, what = _SERVICE_VERBS[verb]
        self.add(points, f"{what} ({' '.join(filter(None, [base, verb, short(unit, 30)]))})")

    def _rule_iptables(self, base: str, args: list[str]) -> None:
        reading = {"-L", "--list", "-S", "--list-rules", "list", "status", "show", "--state"}
        self.add(1 if set(args) & reading else 6, f"changes the firewall ({base})")

    _rule_ip6tables = _rule_nft = _rule_ufw = _rule_firewall_cmd = _rule_iptables

    def _rule_ip(self, base: str, args: list[str]) -> None:
        if set(args) & {"down", "del", "delete", "flush", "add", "change", "replace"}:
            self.add(6, f"changes network interfaces or routes ({base})")

    _rule_ifconfig = _rule_route = _rule_ip

    def _rule_crontab(self, base: str, args: list[str]) -> None:
        if "r" in short_flags(args):
            self.add(7, "deletes scheduled jobs (crontab -r)")
        elif "l" not in short_flags(args):
            self.add(5, "edits scheduled jobs (crontab)")

    def _rule_at(self, base: str, args: list[str]) -> None:
        self.add(4, f"schedules a job for later ({base})")

    _rule_batch = _rule_at

    def _rule_useradd(self, base: str, args: list[str]) -> None:
        self.add(7, f"changes user accounts or passwords ({base})")

    _rule_userdel = _rule_usermod = _rule_adduser = _rule_deluser = _rule_useradd
    _rule_passwd = _rule_chpasswd = _rule_groupadd = _rule_groupdel = _rule_useradd
    _rule_gpasswd = _rule_visudo = _rule_chage = _rule_useradd

    def _rule_apt(self, base: str, args: list[str]) -> None:
        changing = {
            "install",
            "remove",
            "purge",
            "upgrade",
            "dist-upgrade",
            "full-upgrade",
            "autoremove",
            "add",
            "del",
            "reinstall",
            "erase",
            "update",
            "-S",
            "-R",
            "-U",
            "-Syu",
        }
        if set(args) & changing:
            self.add(
                5, f"installs or removes packages ({base} {next(a for a in args if a in changing)})"
            )

    _rule_apt_get = _rule_yum = _rule_dnf = _rule_apk = _rule_pacman = _rule_apt
    _rule_zypper = _rule_snap = _rule_brew = _rule_emerge = _rule_apt

    def _rule_dpkg(self, base: str, args: list[str]) -> None:
        if set(args) & {"-i", "--install", "-r", "--remove", "-P", "--purge"}:
            self.add(5, f"installs or removes packages ({base})")

    def _rule_rpm(self, base: str, args: list[str]) -> None:
        if {"i", "e", "U"} & short_flags(args):
            self.add(5, f"installs or removes packages ({base})")

    def _rule_pip(self, base: str, args: list[str]) -> None:
        if set(args) & {"install", "uninstall", "add", "remove", "get", "i"}:
            self.add(4, f"installs packages ({base})")

    _rule_pip3 = _rule_npm = _rule_yarn = _rule_pnpm = _rule_gem = _rule_cargo = _rule_pip

    def _rule_docker(self, base: str, args: list[str]) -> None:
        joined = " ".join(args)
        if re.search(
            r"--privileged|--pid[= ]host|--net(?:work)?[= ]host|docker\.sock|-v\s+/:|--volume[= ]/:|--cap-add",
            joined,
        ):
            self.add(9, f"runs a container with host-level access ({base} {short(joined, 40)})")
        operands = operands_of(args)
        verb = operands[0] if operands else ""
        if verb in ("rm", "rmi", "kill", "stop", "prune", "system", "volume", "network"):
            self.add(5, f"removes or stops containers or their data ({base} {verb})")
        elif verb in (
            "run",
            "exec",
            "create",
            "start",
            "restart",
            "build",
            "pull",
            "push",
            "cp",
            "compose",
        ):
            self.add(4, f"runs or changes containers ({base} {verb})")

    _rule_podman = _rule_docker

    def _rule_kubectl(self, base: str, args: list[str]) -> None:
        operands = operands_of(args)
        if operands and operands[0] not in (
            "get",
            "describe",
            "logs",
            "top",
            "version",
            "explain",
            "api-resources",
        ):
            self.add(5, f"changes the cluster (kubectl {operands[0]})")

    def _rule_git(self, base: str, args: list[str]) -> None:
        if (
            ("push" in args and set(args) & {"-f", "--force"})
            or "--hard" in args
            or ("clean" in args and "f" in short_flags(args))
        ):
            self.add(4, "rewrites or discards git history or files")
        elif set(args) & {"clone", "fetch", "pull", "push"}:
            self.add(2, "talks to a git remote")

    def _rule_find(self, base: str, args: list[str]) -> None:
        if "-delete" in args:
            self.add(6, "deletes files (find -delete)")
        for i, arg in enumerate(args):
            if arg in ("-exec", "-execdir", "-ok", "-okdir") and i + 1 < len(args):
                rest = args[i + 1 :]
                end = next((j for j, a in enumerate(rest) if a in (";", "+")), len(rest))
                if rest[:end]:
                    self._run(rest[0], rest[1:end], [], wrapped=1)

    def _rule_tee(self, base: str, args: list[str]) -> None:
        for path in operands_of(args):
            self._write_target(path, f"tee {short(path, 40)}")

    def _rule_cp(self, base: str, args: list[str]) -> None:
        operands = operands_of(args)
        for path in operands[-1:] if base in ("cp", "mv", "ln", "install", "rsync") else operands:
            if is_secret_path(path) or is_system_path(path):
                self._write_target(path, f"{base} into {short(path, 40)}")
        if base == "mv":
            self.add(2, "moves files (mv)")
        elif base == "truncate":
            self.add(4, "truncates files")
        elif base in ("mount", "umount"):
            self.add(6, f"changes mounted filesystems ({base})")

    _rule_mv = _rule_ln = _rule_install = _rule_truncate = _rule_touch = _rule_mkdir = _rule_cp
    _rule_mount = _rule_umount = _rule_cp

    def _rule_sed(self, base: str, args: list[str]) -> None:
        if any(a.startswith("-i") or a.startswith("--in-place") for a in args):
            self.add(3, "edits files in place (sed -i)")
            self._systemoperands(base, operands_of(args)[1:])

    def _rule_awk(self, base: str, args: list[str]) -> None:
        program = operands_of(args)[:1]
        if program and re.search(r"\bsystem\s*\(|\|\s*getline|\|&|print[^;}]*\|\s*\"", program[0]):
            self.add(6, f"{base} runs commands (system() or pipes)")

    _rule_gawk = _rule_mawk = _rule_awk

    def _rule_history(self, base: str, args: list[str]) -> None:
        if set(args) & {"-c", "-w", "-d"}:
            self.add(6, "tampers with shell history")

    def _rule_unset(self, base: str, args: list[str]) -> None:
        if set(args) & {"HISTFILE", "HISTSIZE"}:
            self.add(6, "tampers with shell history")

    def _rule_export(self, base: str, args: list[str]) -> None:
        for arg in args:
            match = ASSIGNMENT.match(arg)
            if match and match.group(1) in VARIABLE_FINDINGS:
                self.add(*VARIABLE_FINDINGS[match.group(1)])

    _rule_declare = _rule_local = _rule_readonly = _rule_typeset = _rule_export

    def _rule_alias(self, base: str, args: list[str]) -> None:
        self.add(3, "defines aliases (can redefine commands)")

    def _rule_mkfifo(self, base: str, args: list[str]) -> None:
        self.add(4, f"creates named pipes ({base}, common in reverse shells)")

    _rule_mknod = _rule_mkfifo

    def _rule_screen(self, base: str, args: list[str]) -> None:
        self.add(3, f"keeps running after the request ends ({base})")

    _rule_tmux = _rule_disown = _rule_screen

    def _rule_chattr(self, base: str, args: list[str]) -> None:
        self.add(6, "changes file attributes (chattr)")

    def _rule_setcap(self, base: str, args: list[str]) -> None:
        self.add(7, "grants file capabilities (setcap)")

    def _rule_insmod(self, base: str, args: list[str]) -> None:
        self.add(8, f"changes kernel modules ({base})")

    _rule_rmmod = _rule_modprobe = _rule_insmod

    def _rule_sysctl(self, base: str, args: list[str]) -> None:
        if "w" in short_flags(args) or any("=" in a for a in args):
            self.add(6, "changes kernel parameters (sysctl)")

    def _rule_perl(self, base: str, args: list[str]) -> None:
        self._interpreter(base, args)
        if any(a.startswith("-i") for a in args):
            self.add(3, "edits files in place (perl -i)")
