// An embedder imports one module: `import Herald` brings the event loop (HeraldEventLoop) and the JSON parser and
// writer (HeraldJSON) with the message model, the roles and the bus, as they appear in Herald's own public API.
@_exported public import HeraldEventLoop
@_exported public import HeraldJSON
