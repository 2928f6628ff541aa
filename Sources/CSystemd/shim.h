// sd_notify(3) and sd_watchdog_enabled(3) from libsystemd (Debian's libsystemd-dev): readiness, stopping and
// watchdog notifications to the service manager when run under systemd (NOTIFY_SOCKET set); no-ops otherwise.
#include <systemd/sd-daemon.h>
