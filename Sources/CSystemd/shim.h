// From libsystemd (Debian's libsystemd-dev):
// - sd_notify(3) and sd_watchdog_enabled(3): readiness, stopping and watchdog notifications to the service manager
//   when run under systemd (NOTIFY_SOCKET set); no-ops otherwise.
// - sd-bus(3): the D-Bus client of the desktop presenter, driven by Herald's event loop (sd_bus_get_fd,
//   sd_bus_get_events, sd_bus_get_timeout, sd_bus_process); only its non-variadic calls are used from Swift.
#include <systemd/sd-daemon.h>
#include <systemd/sd-bus.h>
