// A plugin's configuration and messages are `JSONObject`s from HeraldJSON, the parser and writer Herald itself uses:
// re-exported so that a plugin written with `import HeraldPluginKit` alone sees them. The kit depends on HeraldJSON
// and nothing else of Herald's, so the shared object links only that small library, not the host.
@_exported public import HeraldJSON
