// The ABI is the header; this file only checks, at compile time, the layout promises the header makes
// (SwiftPM also needs one source file per C target).
#include "herald_plugin.h"

_Static_assert(offsetof(herald_plugin_v1, abi_version) == 0, "abi_version is the first field of every ABI version");
_Static_assert(sizeof(herald_fetch_result) == sizeof(int32_t), "herald_fetch_result is 32 bits wide");
_Static_assert(HERALD_PRESENT_BADGE == 1 && HERALD_PRESENT_SOUND == 2 && HERALD_PRESENT_ALERT == 4 &&
               HERALD_PRESENT_LIST == 8 && HERALD_PRESENT_BANNER == 16,
               "presentation bits are UNNotificationPresentationOptions' raw values");
