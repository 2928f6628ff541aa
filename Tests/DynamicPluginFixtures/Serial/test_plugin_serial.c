// The same C plugin, asking Herald to call it from one thread at a time (HERALD_PLUGIN_SERIAL), and written
// against ABI 1.1: it declares a notification category (the other fixture is a plugin of ABI 1.0).
#define FIXTURE_NAME "test-plugin-serial"
#define FIXTURE_FLAGS HERALD_PLUGIN_SERIAL
#define FIXTURE_CATEGORIES                                                                                  \
    "{\"invite\": {\"custom-dismiss-action\": true, \"actions\": ["                                        \
    "{\"identifier\": \"accept\", \"title\": \"Accept\", \"foreground\": true},"                          \
    "{\"identifier\": \"decline\", \"title\": \"Decline\", \"destructive\": true},"                       \
    "{\"identifier\": \"note\", \"title\": \"Note\", \"text-input\": {\"button-title\": \"Send\", "      \
    "\"placeholder\": \"Why\"}}]}}"
#include "test_plugin_impl.h"
