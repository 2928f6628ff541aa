import CHeraldPluginABI
public import Herald
import Logging

/// A handler plugin loaded from a shared object that speaks Herald's C plugin ABI (`herald_plugin.h`, version 1).
///
/// ```swift
/// let plugins = try DynamicPlugin.loadAll(paths: ["/usr/lib/herald/plugins/libweather.so"])
/// for plugin in plugins { try herald.register(plugin) }
/// ```
///
/// **Roles.** The plugin plays exactly the roles whose functions its descriptor sets: `will_present` or
/// `did_receive_response` make it a `NotificationHandler`, `did_receive_message` a `MessageHandler`, `fetch`
/// a `BackgroundFetchWorker`, `did_receive_token` a `TokenHandler`. (`load` returns an instance of a subclass
/// that conforms to those protocols and no others, so `PluginRoles/of(_:)` and the bus see the same roles.)
///
/// **Calls.** Every call runs on threads of the plugin's own (``Specification/threads``, one for a plugin that
/// sets `HERALD_PLUGIN_SERIAL`, so its calls never overlap), never on the event loop, so a plugin may block. The
/// message goes over as JSON (see `herald_plugin.h`); the answer comes back as an integer. A plugin that cannot
/// be called (unloaded, or thousands of calls waiting) gets the role's neutral answer: no presentation options,
/// `.failed` for a fetch, a thrown ``DynamicPluginError`` for a data message.
///
/// **Unloading.** ``stop()`` (Herald calls it at shutdown) and ``unload()`` refuse new calls and run the plugin's
/// `deinit_plugin` once every running call has returned. A plugin that is dropped without either gets
/// `deinit_plugin` when the last reference goes. The library stays mapped until the process exits: it is opened
/// with `RTLD_NODELETE`, because a shared object with Swift code cannot be unmapped safely.
public class DynamicPlugin: HeraldPlugin, @unchecked Sendable {
    // @unchecked Sendable: `library` is Sendable; `logger` is behind a lock.

    /// How to load one plugin.
    public struct Specification: Sendable, Hashable {
        /// The shared object's path. A path without a slash is taken relative to the current directory (never
        /// looked up in the library search path).
        public var path: String
        /// Given to the plugin's `init_plugin` as a JSON object.
        public var configuration: JSONObject
        /// How many threads call into the plugin at most at once (ignored for a `HERALD_PLUGIN_SERIAL` plugin,
        /// which gets one).
        public var threads: Int

        public init(path: String, configuration: JSONObject = [:], threads: Int = 4) {
            self.path = path
            self.configuration = configuration
            self.threads = threads
        }
    }

    /// How long ``stop()`` waits for calls still running (a fetch past its deadline, say) before it returns;
    /// the plugin's `deinit_plugin` then runs when the last of them returns.
    public static let stopTimeout: Duration = .seconds(5)

    /// How many calls may wait for the plugin's threads before more get the neutral answer.
    static let queueLimit = 4096

    let library: PluginLibrary
    private let logger: Locked<Logger>

    /// The shared object's path, as given.
    public var path: String { library.path }
    /// The name the plugin gives itself in its descriptor.
    public var name: String { library.name }
    /// Whether the plugin asked to be called from one thread at a time (`HERALD_PLUGIN_SERIAL`).
    public var isSerial: Bool { library.isSerial }
    /// The notification categories the plugin declares (`categories_json`, plugin ABI 1.1): register them with
    /// `Herald.register(category:)` (`herald serve` does). Empty for a plugin without.
    public var categories: [NotificationCategory] { library.categories }

    required init(library: PluginLibrary) {
        self.library = library
        var logger = Logger(label: "herald")
        logger[metadataKey: "plugin"] = "\(library.name)"
        self.logger = Locked(logger)
    }

    // MARK: Loading

    /// Loads the plugin at `path`: `dlopen` (`RTLD_NOW | RTLD_LOCAL`), its `herald_plugin_entry_v1`, a check of
    /// the descriptor, and the plugin's `init_plugin` with `configuration`.
    ///
    /// - Throws: ``DynamicPluginError``, naming the path: ``DynamicPluginError/fileNotFound(path:)``,
    ///   ``DynamicPluginError/notLoadable(path:reason:)`` (not a shared object; with `dlerror()`'s text),
    ///   ``DynamicPluginError/missingEntryPoint(path:symbol:reason:)``,
    ///   ``DynamicPluginError/unsupportedABIVersion(path:found:supported:)``,
    ///   ``DynamicPluginError/invalidDescriptor(path:reason:)``, ``DynamicPluginError/initFailed(path:plugin:status:)``.
    public static func load(path: String, configuration: JSONObject = [:], threads: Int = 4) throws(DynamicPluginError) -> DynamicPlugin {
        try load(Specification(path: path, configuration: configuration, threads: threads))
    }

    /// Loads one plugin; see ``load(path:configuration:threads:)``.
    public static func load(_ specification: Specification) throws(DynamicPluginError) -> DynamicPlugin {
        let library = try PluginLibrary(
            path: specification.path, configuration: JSONValue.object(specification.configuration).jsonString(),
            threads: specification.threads, queueLimit: queueLimit
        )
        return make(library)
    }

    /// Loads every plugin in `paths`, in order, with an empty configuration: all of them or none. When one is
    /// refused, the ones already loaded are unloaded (their `deinit_plugin` runs) and its error is thrown, so a
    /// daemon never starts with only some of its plugins. Register the result on a `Herald` before `start()`.
    ///
    /// ```swift
    /// do {
    ///     for plugin in try DynamicPlugin.loadAll(paths: options.plugins) { try herald.register(plugin) }
    /// } catch {
    ///     // error.description names the file and what is wrong with it; exit non-zero.
    /// }
    /// ```
    public static func loadAll(paths: [String]) throws(DynamicPluginError) -> [DynamicPlugin] {
        try loadAll(paths.map { Specification(path: $0) })
    }

    /// Loads every plugin of `specifications` (each with its configuration), all or none; see ``loadAll(paths:)``.
    public static func loadAll(_ specifications: [Specification]) throws(DynamicPluginError) -> [DynamicPlugin] {
        var loaded: [DynamicPlugin] = []
        for specification in specifications {
            do throws(DynamicPluginError) {
                loaded.append(try load(specification))
            } catch {
                for plugin in loaded.reversed() { plugin.library.closeUnused() }
                throw error
            }
        }
        return loaded
    }

    /// An instance of the subclass that conforms to exactly the roles the descriptor offers.
    private static func make(_ library: PluginLibrary) -> DynamicPlugin {
        let descriptor = library.descriptor
        let notification = descriptor.will_present != nil || descriptor.did_receive_response != nil
        let message = descriptor.did_receive_message != nil
        let fetch = descriptor.fetch != nil
        let token = descriptor.did_receive_token != nil
        let type: DynamicPlugin.Type =
            switch (notification, message, fetch, token) {
            case (true, false, false, false): DynamicPluginN.self
            case (false, true, false, false): DynamicPluginM.self
            case (false, false, true, false): DynamicPluginF.self
            case (false, false, false, true): DynamicPluginT.self
            case (true, true, false, false): DynamicPluginNM.self
            case (true, false, true, false): DynamicPluginNF.self
            case (true, false, false, true): DynamicPluginNT.self
            case (false, true, true, false): DynamicPluginMF.self
            case (false, true, false, true): DynamicPluginMT.self
            case (false, false, true, true): DynamicPluginFT.self
            case (true, true, true, false): DynamicPluginNMF.self
            case (true, true, false, true): DynamicPluginNMT.self
            case (true, false, true, true): DynamicPluginNFT.self
            case (false, true, true, true): DynamicPluginMFT.self
            case (true, true, true, true): DynamicPluginNMFT.self
            case (false, false, false, false): DynamicPlugin.self  // refused by PluginLibrary; kept total
            }
        return type.init(library: library)
    }

    // MARK: Lifecycle

    public var descriptor: PluginDescriptor {
        PluginDescriptor(name: library.name, summary: "dynamic plugin \(library.path)\(library.isSerial ? " (serial)" : "")")
    }

    public func start(_ context: PluginContext) async throws {
        logger.withLock { $0 = context.logger }
    }

    public func stop() async {
        await unload()
    }

    /// Refuses new calls and runs the plugin's `deinit_plugin` once the running ones have returned, waiting for
    /// them at most ``stopTimeout``. Idempotent. A plugin that is unloaded cannot be called again.
    public func unload() async {
        if await !library.close(waitingAtMost: Self.stopTimeout) {
            logger.withLock { $0 }.warning(
                "calls into the plugin still running after the stop timeout; it is deinitialised when they return",
                metadata: ["timeout": "\(Self.stopTimeout)"])
        }
    }

    // MARK: Calls (the role protocols' requirements; subclasses conform to the roles the descriptor offers)

    public func willPresent(_ message: RemoteMessage) async -> PresentationOptions {
        guard let willPresent = library.descriptor.will_present else { return [] }
        let result = await library.call { _, context in
            MessageJSON.bytes(message).withUnsafeBufferPointer { willPresent($0.baseAddress, $0.count, context) }
        }
        switch result {
        case .success(let bits):
            return PresentationOptions(rawValue: UInt(bits & 0x1F))
        case .failure(let error):
            callFailed("will_present", message, error)
            return []
        }
    }

    public func didReceive(_ response: NotificationResponse) async {
        guard let didReceiveResponse = library.descriptor.did_receive_response else { return }
        let result = await library.call { _, context in
            MessageJSON.bytes(response).withUnsafeBufferPointer { didReceiveResponse($0.baseAddress, $0.count, context) }
        }
        if case .failure(let error) = result { callFailed("did_receive_response", response.message, error) }
    }

    public func didReceive(_ message: RemoteMessage) async throws {
        guard let didReceiveMessage = library.descriptor.did_receive_message else { return }
        let result = await library.call { _, context in
            MessageJSON.bytes(message).withUnsafeBufferPointer { didReceiveMessage($0.baseAddress, $0.count, context) }
        }
        switch result {
        case .success(let status):
            if status != HERALD_PLUGIN_OK {
                throw DynamicPluginError.handlerFailed(plugin: name, call: "did_receive_message", status: status)
            }
        case .failure(let error):
            throw error
        }
    }

    public func fetch(_ message: RemoteMessage) async -> BackgroundFetchResult {
        guard let fetch = library.descriptor.fetch else { return .noData }
        let result = await library.call { _, context in
            MessageJSON.bytes(message).withUnsafeBufferPointer { fetch($0.baseAddress, $0.count, context) }
        }
        switch result {
        case .success(let answer):
            switch answer {
            case HERALD_FETCH_NEW_DATA: return .newData
            case HERALD_FETCH_NO_DATA: return .noData
            default: return .failed
            }
        case .failure(let error):
            callFailed("fetch", message, error)
            return .failed
        }
    }

    public func didReceiveRegistrationToken(_ token: String?) async {
        guard let didReceiveToken = library.descriptor.did_receive_token else { return }
        let result = await library.call { _, context in
            if let token {
                token.withCString { didReceiveToken($0, context) }
            } else {
                didReceiveToken(nil, context)
            }
        }
        if case .failure(let error) = result {
            logger.withLock { $0 }.error("the plugin could not be told the registration token", metadata: ["error": "\(error)"])
        }
    }

    private func callFailed(_ call: String, _ message: RemoteMessage, _ error: DynamicPluginError) {
        logger.withLock { $0 }.error(
            "the plugin could not be called",
            metadata: [
                "call": "\(call)", "message_id": "\(message.messageID ?? "")", "error": "\(error)",
            ])
    }
}

// One subclass per combination of roles (N: notification handler, M: message handler, F: background-fetch
// worker, T: token handler): conformance is what the bus reads roles from, and a Swift class cannot choose its
// conformances at run time. The calls themselves are DynamicPlugin's.
final class DynamicPluginN: DynamicPlugin, NotificationHandler, @unchecked Sendable {}
final class DynamicPluginM: DynamicPlugin, MessageHandler, @unchecked Sendable {}
final class DynamicPluginF: DynamicPlugin, BackgroundFetchWorker, @unchecked Sendable {}
final class DynamicPluginT: DynamicPlugin, TokenHandler, @unchecked Sendable {}
final class DynamicPluginNM: DynamicPlugin, NotificationHandler, MessageHandler, @unchecked Sendable {}
final class DynamicPluginNF: DynamicPlugin, NotificationHandler, BackgroundFetchWorker, @unchecked Sendable {}
final class DynamicPluginNT: DynamicPlugin, NotificationHandler, TokenHandler, @unchecked Sendable {}
final class DynamicPluginMF: DynamicPlugin, MessageHandler, BackgroundFetchWorker, @unchecked Sendable {}
final class DynamicPluginMT: DynamicPlugin, MessageHandler, TokenHandler, @unchecked Sendable {}
final class DynamicPluginFT: DynamicPlugin, BackgroundFetchWorker, TokenHandler, @unchecked Sendable {}
final class DynamicPluginNMF: DynamicPlugin, NotificationHandler, MessageHandler, BackgroundFetchWorker, @unchecked Sendable {}
final class DynamicPluginNMT: DynamicPlugin, NotificationHandler, MessageHandler, TokenHandler, @unchecked Sendable {}
final class DynamicPluginNFT: DynamicPlugin, NotificationHandler, BackgroundFetchWorker, TokenHandler, @unchecked Sendable {}
final class DynamicPluginMFT: DynamicPlugin, MessageHandler, BackgroundFetchWorker, TokenHandler, @unchecked Sendable {}
final class DynamicPluginNMFT: DynamicPlugin, NotificationHandler, MessageHandler, BackgroundFetchWorker, TokenHandler, @unchecked Sendable
{}
