import CHeraldPluginABI
import Glibc
import Herald

/// One loaded plugin: the library handle, its descriptor, the context its `init_plugin` made, and the threads
/// calls into it run on.
///
/// Calls run on a ``BlockingPool`` of the plugin's own (one thread for a `HERALD_PLUGIN_SERIAL` plugin, which
/// is what serialises its calls), never on the event loop and never on the loop's pool, so a slow plugin holds
/// up neither the bus nor the store's commits nor another plugin. `deinit_plugin` runs once, after the last call
/// has returned: at ``close(waitingAtMost:)`` when nothing is running, otherwise when the last running call
/// returns, on its thread.
final class PluginLibrary: @unchecked Sendable {
    // @unchecked Sendable: `descriptor`, `context` and `handle` are written once in init and only read after;
    // the C side is called as the descriptor's flags allow; everything mutable is behind `state`.

    let path: String
    let name: String
    let descriptor: herald_plugin_v1
    /// The categories of the descriptor's `categories_json` (ABI 1.1); empty without.
    let categories: [NotificationCategory]
    let isSerial: Bool
    private let handle: UnsafeMutableRawPointer
    private let context: UnsafeMutableRawPointer?
    private let threads: Int
    private let queueLimit: Int

    private struct State {
        var pool: BlockingPool?
        var running = 0
        var closed = false
        var finalized = false
        var nextWaiter = 0
        var waiters: [Int: CheckedContinuation<Void, Never>] = [:]
    }

    private let state = Locked(State())

    /// Why `file` (or the directory it is in) is not safe to load code from, or nil when it is: as sshd's StrictModes,
    /// neither may be writable by its group or by others (a directory with the sticky bit, like /tmp, may be: no
    /// one can replace a file of someone else there), and each must belong to root or to
    /// the user Herald runs as.
    static func unsafePermissions(_ file: String) -> String? {
        let slash = file.lastIndex(of: "/")!
        let directory = slash == file.startIndex ? "/" : String(file[..<slash])
        for (place, what) in [(file, "the file"), (directory, "its directory \(directory)")] {
            var info = stat()
            guard stat(place, &info) == 0 else { continue }  // dlopen reports what is wrong with it
            let mode = info.st_mode
            let sticky = mode & S_IFMT == S_IFDIR && mode & S_ISVTX != 0
            let writableByOthers = mode & S_IWOTH != 0
            if !sticky && (mode & S_IWGRP != 0 || writableByOthers) {
                let octal = String(mode & 0o7777, radix: 8)
                return
                    "\(what) is writable by \(writableByOthers ? "others" : "its group") (mode \(octal)): whoever can change it could run code inside Herald; chmod go-w it"
            }
            if info.st_uid != 0 && info.st_uid != geteuid() {
                return "\(what) belongs to uid \(info.st_uid), neither root nor the user Herald runs as (uid \(geteuid()))"
            }
        }
        return nil
    }

    /// Opens `path`, checks its entry point and descriptor, and calls `init_plugin` with `configuration`.
    init(path: String, configuration: String, threads: Int, queueLimit: Int) throws(DynamicPluginError) {
        // dlopen searches the library path for a name without a slash; a plugin path is a file path.
        let file = path.contains("/") ? path : "./" + path
        if access(file, F_OK) != 0, errno == ENOENT { throw .fileNotFound(path: path) }
        if let reason = Self.unsafePermissions(file) { throw .unsafePermissions(path: path, reason: reason) }
        // RTLD_NODELETE: the Swift runtime keeps pointers into the metadata of every Swift image it has seen and
        // never forgets them, so a library with Swift code must never be unmapped; dlclose only drops the count.
        guard let handle = dlopen(file, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE) else {
            throw .notLoadable(path: path, reason: Self.linkerError())
        }
        var keep = false
        defer { if !keep { dlclose(handle) } }
        _ = dlerror()
        guard let symbol = dlsym(handle, HERALD_PLUGIN_ENTRY_SYMBOL) else {
            throw .missingEntryPoint(path: path, symbol: HERALD_PLUGIN_ENTRY_SYMBOL, reason: Self.linkerError())
        }
        let entry = unsafeBitCast(symbol, to: herald_plugin_entry_v1_fn.self)
        guard let descriptorPointer = entry() else {
            throw .invalidDescriptor(path: path, reason: "\(HERALD_PLUGIN_ENTRY_SYMBOL) returned NULL")
        }
        // The version is read alone first: a descriptor of another ABI version may be shorter than version 1's.
        let version = UnsafeRawPointer(descriptorPointer).load(as: UInt32.self)
        guard version == HERALD_PLUGIN_ABI_VERSION else {
            throw .unsupportedABIVersion(path: path, found: version, supported: HERALD_PLUGIN_ABI_VERSION)
        }
        let descriptor = descriptorPointer.pointee
        guard let namePointer = descriptor.name else {
            throw .invalidDescriptor(path: path, reason: "its descriptor has no name (name is NULL)")
        }
        let name = String(decoding: UnsafeRawBufferPointer(start: namePointer, count: strlen(namePointer)), as: UTF8.self)
        guard !name.isEmpty else { throw .invalidDescriptor(path: path, reason: "its descriptor's name is empty") }
        guard
            descriptor.will_present != nil || descriptor.did_receive_response != nil || descriptor.did_receive_message != nil
                || descriptor.fetch != nil || descriptor.did_receive_token != nil
        else {
            throw .invalidDescriptor(
                path: path,
                reason:
                    "\(name) sets none of will_present, did_receive_response, did_receive_message, fetch, did_receive_token: it would never be called"
            )
        }
        // Version 1.1's fields, read only when the flag says the descriptor has them.
        var categories: [NotificationCategory] = []
        if descriptor.flags & UInt32(HERALD_PLUGIN_V1_1) != 0,
            let json = UnsafeRawPointer(descriptorPointer).load(as: herald_plugin_v1_1.self).categories_json
        {
            do {
                categories = try CategoriesJSON.read(String(cString: json))
            } catch {
                throw .invalidDescriptor(path: path, reason: "its categories_json: \(error.message)")
            }
        }
        var context: UnsafeMutableRawPointer?
        if let initPlugin = descriptor.init_plugin {
            let status = configuration.withCString { initPlugin($0, &context) }
            guard status == HERALD_PLUGIN_OK else { throw .initFailed(path: path, plugin: name, status: status) }
        }
        keep = true
        self.path = path
        self.name = name
        self.descriptor = descriptor
        self.categories = categories
        self.isSerial = descriptor.flags & UInt32(HERALD_PLUGIN_SERIAL) != 0
        self.handle = handle
        self.context = context
        self.threads = isSerial ? 1 : max(1, threads)
        self.queueLimit = queueLimit
    }

    private static func linkerError() -> String {
        guard let message = dlerror() else { return "no reason given" }
        return String(cString: message)
    }

    deinit {
        // Nothing can be running: every call holds a reference to the library until it has returned.
        let pool: BlockingPool?? = state.withLock { state in
            guard !state.finalized else { return nil }
            state.finalized = true
            return .some(state.pool)
        }
        if let pool { finalize(pool: pool) }
        dlclose(handle)
    }

    // MARK: Calls

    /// Runs `body` with the descriptor and context on one of the plugin's threads and returns its result, or
    /// ``DynamicPluginError/unavailable(plugin:reason:)`` when the plugin is unloaded or its queue is full.
    func call<T: Sendable>(_ body: @escaping @Sendable (herald_plugin_v1, UnsafeMutableRawPointer?) -> T) async -> Result<
        T, DynamicPluginError
    > {
        let admitted: Result<BlockingPool, DynamicPluginError> = state.withLock { state in
            guard !state.closed else { return .failure(.unavailable(plugin: name, reason: "it has been unloaded")) }
            if state.pool == nil {
                do {
                    state.pool = try BlockingPool(threads: threads, queueLimit: queueLimit, name: "plugin-\(name)")
                } catch {
                    return .failure(.unavailable(plugin: name, reason: "its threads could not be started (\(error))"))
                }
            }
            state.running += 1
            return .success(state.pool!)
        }
        let pool: BlockingPool
        switch admitted {
        case .success(let admittedPool): pool = admittedPool
        case .failure(let error): return .failure(error)
        }
        return await withCheckedContinuation { (continuation: CheckedContinuation<Result<T, DynamicPluginError>, Never>) in
            do {
                try pool.submit(
                    { [self] in
                        let result = body(descriptor, context)
                        callEnded()
                        continuation.resume(returning: .success(result))
                    },
                    onCancel: { [self] in
                        callEnded()
                        continuation.resume(returning: .failure(.unavailable(plugin: name, reason: "it has been unloaded")))
                    })
            } catch {
                callEnded()
                continuation.resume(returning: .failure(.unavailable(plugin: name, reason: "\(error)")))
            }
        }
    }

    private func callEnded() {
        let finalize: (pool: BlockingPool?, waiters: [CheckedContinuation<Void, Never>])? = state.withLock { state in
            state.running -= 1
            guard state.closed, state.running == 0, !state.finalized else { return nil }
            state.finalized = true
            defer { state.waiters.removeAll() }
            return (state.pool, Array(state.waiters.values))
        }
        guard let finalize else { return }
        // The last call of a closed plugin returned: `deinit_plugin` runs here, on that call's thread.
        self.finalize(pool: finalize.pool)
        for waiter in finalize.waiters { waiter.resume() }
    }

    /// Calls `deinit_plugin` and lets the pool's threads go. The caller has set `finalized`, so this runs once.
    /// The threads are joined from a task: this may be a pool thread, which must not join its own pool.
    private func finalize(pool: BlockingPool?) {
        if let deinitPlugin = descriptor.deinit_plugin { deinitPlugin(context) }
        if let pool { Task.detached { pool.shutdown() } }
    }

    // MARK: Unloading

    /// Refuses new calls, then calls `deinit_plugin` once the running ones have returned. Returns `true` when
    /// that happened within `timeout`; otherwise `deinit_plugin` runs when the last running call returns.
    @discardableResult
    func close(waitingAtMost timeout: Duration) async -> Bool {
        enum Next {
            case done
            case finalizeNow(BlockingPool?)
            case wait
        }
        let next: Next = state.withLock { state in
            state.closed = true
            if state.finalized { return .done }
            if state.running == 0 {
                state.finalized = true
                return .finalizeNow(state.pool)
            }
            return .wait
        }
        switch next {
        case .done:
            return true
        case .finalizeNow(let pool):
            finalize(pool: pool)
            return true
        case .wait:
            return await waitUntilFinalized(atMost: timeout)
        }
    }

    /// Unloads a plugin that was never called (``DynamicPlugin/loadAll(_:)`` giving up): `deinit_plugin` now.
    func closeUnused() {
        let pool: BlockingPool?? = state.withLock { state in
            state.closed = true
            guard !state.finalized, state.running == 0 else { return nil }
            state.finalized = true
            return .some(state.pool)
        }
        if let pool { finalize(pool: pool) }
    }

    private func waitUntilFinalized(atMost timeout: Duration) async -> Bool {
        let id = state.withLock { state in
            state.nextWaiter += 1
            return state.nextWaiter
        }
        let timer = Locked<Task<Void, Never>?>(nil)
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let registered = state.withLock { state in
                guard !state.finalized else { return false }
                state.waiters[id] = continuation
                return true
            }
            guard registered else {
                continuation.resume()
                return
            }
            // Whichever comes first, the last call's return or the timeout, takes the waiter out and resumes it.
            timer.withLock {
                $0 = Task { [self] in
                    try? await Task.sleep(for: timeout)
                    state.withLock { $0.waiters.removeValue(forKey: id) }?.resume()
                }
            }
        }
        timer.withLock { $0 }?.cancel()
        return state.withLock { $0.finalized }
    }
}
