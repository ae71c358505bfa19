#!/bin/sh
# Installs everything the testbed needs, as root, on Debian 12 or a Debian-based image:
# the Debian packages (iproute2, tcpdump, the real protocol peers...), then a virtual
# environment in .venv with the project and its test tools. Safe to run again: it installs
# only what is missing. The README, the Dockerfile and .ci/run all install through this file.
#
#   TESTBED_INSTALL_VM=1   also install what CI's netem-in-a-VM stage needs (qemu, busybox)
#   TESTBED_INSTALL_BROWSER=0   leave out Debian's chromium (the campaign's reproduction report
#                          is rendered in it headless: its screenshot and its test)
#   PYTHON=python3.12      the interpreter for the venv (default: python3, >= 3.11)
#   TESTBED_INSTALL_DEPS_ONLY=1   install everything, but do not mark the project installed:
#                          the Dockerfile runs this with pyproject.toml alone (a layer that
#                          source changes leave cached), then again with the sources
set -eu
cd "$(dirname "$0")/.."

APT_PACKAGES="python3 python3-venv python3-dev gcc iproute2 iptables tcpdump iperf3 ethtool \
ca-certificates curl nghttp2-client nghttp2-server ngtcp2-client ngtcp2-server tshark \
openssh-client openssh-server pkg-config libngtcp2-dev libngtcp2-crypto-gnutls-dev libnghttp3-dev \
libgnutls28-dev"
APT_VM_PACKAGES="qemu-system-x86 busybox-static cpio kmod"
APT_BROWSER_PACKAGES="chromium"

if [ "$(id -u)" -ne 0 ]; then
    echo "harness/install.sh: error: run as root (it installs Debian packages)" >&2
    exit 2
fi

packages="$APT_PACKAGES"
[ "${TESTBED_INSTALL_VM:-0}" = "1" ] && packages="$packages $APT_VM_PACKAGES"
[ "${TESTBED_INSTALL_BROWSER:-1}" = "1" ] && packages="$packages $APT_BROWSER_PACKAGES"
missing=""
for pkg in $packages; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" \
        || missing="$missing $pkg"
done
if [ -n "$missing" ]; then
    echo "install: Debian packages:$missing"
    apt-get update -qq
    # openssh-server is for the remote-host tests (an sshd the tests start inside a tb-
    # namespace): no package this installs may start a service on the host. Debian's
    # policy-rc.d (exit 101) forbids it while apt runs; one already there is left as it is.
    policy=""
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
        chmod 755 /usr/sbin/policy-rc.d
        policy=/usr/sbin/policy-rc.d
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing \
        || { [ -z "$policy" ] || rm -f "$policy"; exit 1; }
    [ -z "$policy" ] || rm -f "$policy"
    case " $missing " in
        *" openssh-server "*)
            # installed here for the tests: not started at boot either
            if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
                systemctl disable --quiet ssh.service ssh.socket 2>/dev/null || true
            fi
            ;;
    esac
fi

PYTHON="${PYTHON:-python3}"
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    echo "harness/install.sh: error: $PYTHON is older than 3.11" >&2
    exit 2
fi
if [ ! -x .venv/bin/python ]; then
    echo "install: virtual environment .venv ($("$PYTHON" --version))"
    "$PYTHON" -m venv .venv
fi
# Reinstall only when the project's metadata or the C sources of the emulator's packet path
# (built by pip as an extension module) changed since the last install.
stamp=.venv/.testbed-installed
csrc=$(ls setup.py netem/emulator/csrc/*.c netem/emulator/csrc/*.h 2>/dev/null || true)
want=$(cat pyproject.toml $csrc | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    echo "install: pip install -e '.[test]' (log: .venv/pip-install.log)"
    if ! .venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test]' \
        > .venv/pip-install.log 2>&1; then
        tail -n 30 .venv/pip-install.log >&2
        echo "harness/install.sh: error: pip install failed (see .venv/pip-install.log)" >&2
        exit 1
    fi
    if [ "${TESTBED_INSTALL_DEPS_ONLY:-0}" = "1" ]; then
        echo "install: dependencies only (the next run installs the project itself)"
        exit 0
    fi
    echo "$want" > "$stamp"
fi
# The native HTTP/3 endpoint (proto/native/tbh3.c), made now so that the first run does not
# wait for gcc; it is made again whenever its source changes (proto.native.build).
if [ "${TESTBED_INSTALL_DEPS_ONLY:-0}" != "1" ]; then
    .venv/bin/python -m proto.native.build > /dev/null
fi
echo "install: done; the testbed command is .venv/bin/testbed"
