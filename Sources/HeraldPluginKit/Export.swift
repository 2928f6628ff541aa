import CHeraldPluginABI
import Glibc
import HeraldJSON

/// The descriptor Herald reads from `herald_plugin_entry_v1`, for `Handler`: call it from the shared object's
/// entry point and return what it returns.
///
/// ```swift
/// @_cdecl("herald_plugin_entry_v1")
/// public func heraldPluginEntry() -> UnsafeRawPointer { HeraldPluginKit.export(MyHandler.self) }
/// ```
///
/// The descriptor sets the calls of the roles `Handler` conforms to (and only those, so Herald registers the
/// plugin in exactly those roles), `HERALD_PLUGIN_SERIAL` when ``DynamicHandler/isSerial`` is `true`, and
/// `Handler.name`. Each load makes one `Handler` with ``DynamicHandler/init(configuration:)``; unloading calls
/// ``DynamicHandler/shutdown()`` and releases it.
///
/// One shared object exports one handler type: exporting a second type traps.
public func export<Handler: DynamicHandler>(_ handler: Handler.Type) -> UnsafeRawPointer {
    UnsafeRawPointer(exported.descriptor(for: Handler.self))
}

/// What this shared object exports. The kit is linked into each plugin, so every plugin has its own.
private let exported = Exported()

private final class Exported: @unchecked Sendable {
    // @unchecked Sendable: the fields are written once, under `mutex`, before the descriptor is handed out.
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private var handlerType: (any DynamicHandler.Type)?
    private var descriptor: UnsafeMutablePointer<herald_plugin_v1>?

    init() {
        mutex = .allocate(capacity: 1)
        pthread_mutex_init(mutex, nil)
    }

    func descriptor<Handler: DynamicHandler>(for type: Handler.Type) -> UnsafeMutablePointer<herald_plugin_v1> {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        if let descriptor {
            precondition(
                handlerType == type,
                "HeraldPluginKit.export: this shared object already exports \(handlerType!); one handler type per plugin")
            return descriptor
        }
        // Lives as long as the library, which Herald never unloads. Always version 1.1's layout; the flag says
        // whether its field is used, so a plugin without categories reads as version 1.0.
        let full = UnsafeMutablePointer<herald_plugin_v1_1>.allocate(capacity: 1)
        full.initialize(to: herald_plugin_v1_1())
        let made = UnsafeMutableRawPointer(full).assumingMemoryBound(to: herald_plugin_v1.self)
        made.pointee.abi_version = HERALD_PLUGIN_ABI_VERSION
        made.pointee.flags = Handler.isSerial ? UInt32(HERALD_PLUGIN_SERIAL) : 0
        if let notification = Handler.self as? any DynamicNotificationHandler.Type, !notification.categories.isEmpty {
            made.pointee.flags |= UInt32(HERALD_PLUGIN_V1_1)
            full.pointee.categories_json = UnsafePointer(strdup(JSONValue.object(notification.categories).jsonString()))
        }
        made.pointee.name = UnsafePointer(strdup(Handler.name))
        made.pointee.init_plugin = initPlugin
        made.pointee.deinit_plugin = deinitPlugin
        if Handler.self is any DynamicNotificationHandler.Type {
            made.pointee.will_present = willPresent
            made.pointee.did_receive_response = didReceiveResponse
        }
        if Handler.self is any DynamicMessageHandler.Type { made.pointee.did_receive_message = didReceiveMessage }
        if Handler.self is any DynamicFetchWorker.Type { made.pointee.fetch = fetch }
        if Handler.self is any DynamicTokenHandler.Type { made.pointee.did_receive_token = didReceiveToken }
        handlerType = type
        descriptor = made
        return made
    }

    var type: (any DynamicHandler.Type)? {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return handlerType
    }
}

/// One loaded instance: the handler and its roles, cast once.
private final class Instance: Sendable {
    let handler: any DynamicHandler
    let notification: (any DynamicNotificationHandler)?
    let message: (any DynamicMessageHandler)?
    let fetch: (any DynamicFetchWorker)?
    let token: (any DynamicTokenHandler)?

    init(_ handler: any DynamicHandler) {
        self.handler = handler
        notification = handler as? any DynamicNotificationHandler
        message = handler as? any DynamicMessageHandler
        fetch = handler as? any DynamicFetchWorker
        token = handler as? any DynamicTokenHandler
    }

    static func from(_ context: UnsafeMutableRawPointer?) -> Instance? {
        context.map { Unmanaged<Instance>.fromOpaque($0).takeUnretainedValue() }
    }

    var name: String { type(of: handler).name }
}

/// Writes one line to standard error (the kit's only way to say why something failed: the ABI carries statuses).
private func report(_ plugin: String, _ text: String) {
    let line = Array("herald plugin \(plugin): \(text)\n".utf8)
    line.withUnsafeBytes { _ = write(2, $0.baseAddress, $0.count) }
}

private func envelope(_ json: UnsafePointer<UInt8>?, _ length: Int) -> JSONValue? {
    guard let json else { return nil }
    return try? JSONParser.parse(UnsafeRawBufferPointer(start: json, count: length))
}

// The C entry points. They capture nothing (C function pointers cannot): the handler type comes from `exported`,
// the instance from the context pointer.

private let initPlugin: @convention(c) (UnsafePointer<CChar>?, UnsafeMutablePointer<UnsafeMutableRawPointer?>?) -> Int32 = {
    config, context in
    guard let type = exported.type, let context else { return 1 }
    let text = config.map { String(cString: $0) } ?? "{}"
    guard let configuration = (try? JSONParser.parse(text))?.objectValue else {
        report(type.name, "the configuration is not a JSON object: \(text)")
        return 2
    }
    do {
        let handler = try type.init(configuration: configuration)
        context.pointee = Unmanaged.passRetained(Instance(handler)).toOpaque()
        return Int32(HERALD_PLUGIN_OK)
    } catch {
        report(type.name, "init(configuration:) failed: \(error)")
        return 3
    }
}

private let deinitPlugin: @convention(c) (UnsafeMutableRawPointer?) -> Void = { context in
    guard let context else { return }
    let instance = Unmanaged<Instance>.fromOpaque(context).takeRetainedValue()
    instance.handler.shutdown()
}

private let willPresent: @convention(c) (UnsafePointer<UInt8>?, Int, UnsafeMutableRawPointer?) -> UInt32 = { json, length, context in
    guard let instance = Instance.from(context), let handler = instance.notification else { return 0 }
    guard let message = envelope(json, length).flatMap(PluginMessage.init(envelope:)) else {
        report(instance.name, "will_present: not a message envelope")
        return 0
    }
    return handler.willPresent(message).rawValue
}

private let didReceiveResponse: @convention(c) (UnsafePointer<UInt8>?, Int, UnsafeMutableRawPointer?) -> Void = { json, length, context in
    guard let instance = Instance.from(context), let handler = instance.notification else { return }
    guard let response = envelope(json, length).flatMap(PluginResponse.init(envelope:)) else {
        report(instance.name, "did_receive_response: not a response envelope")
        return
    }
    handler.didReceive(response)
}

private let didReceiveMessage: @convention(c) (UnsafePointer<UInt8>?, Int, UnsafeMutableRawPointer?) -> Int32 = { json, length, context in
    guard let instance = Instance.from(context), let handler = instance.message else { return 1 }
    guard let message = envelope(json, length).flatMap(PluginMessage.init(envelope:)) else {
        report(instance.name, "did_receive_message: not a message envelope")
        return 2
    }
    do {
        try handler.didReceive(message)
        return Int32(HERALD_PLUGIN_OK)
    } catch {
        report(instance.name, "didReceive(message \(message.messageID ?? "without ID")) failed: \(error)")
        return 1
    }
}

private let fetch: @convention(c) (UnsafePointer<UInt8>?, Int, UnsafeMutableRawPointer?) -> herald_fetch_result = { json, length, context in
    guard let instance = Instance.from(context), let worker = instance.fetch else { return HERALD_FETCH_FAILED }
    guard let message = envelope(json, length).flatMap(PluginMessage.init(envelope:)) else {
        report(instance.name, "fetch: not a message envelope")
        return HERALD_FETCH_FAILED
    }
    switch worker.fetch(message) {
    case .newData: return HERALD_FETCH_NEW_DATA
    case .noData: return HERALD_FETCH_NO_DATA
    case .failed: return HERALD_FETCH_FAILED
    }
}

private let didReceiveToken: @convention(c) (UnsafePointer<CChar>?, UnsafeMutableRawPointer?) -> Void = { token, context in
    guard let instance = Instance.from(context), let handler = instance.token else { return }
    handler.didReceiveRegistrationToken(token.map { String(cString: $0) })
}
