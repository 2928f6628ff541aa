// The same C plugin, asking Herald to call it from one thread at a time (HERALD_PLUGIN_SERIAL).
#define FIXTURE_NAME "test-plugin-serial"
#define FIXTURE_FLAGS HERALD_PLUGIN_SERIAL
#include "test_plugin_impl.h"
