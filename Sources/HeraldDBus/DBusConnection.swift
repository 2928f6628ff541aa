import CLibUV
import CSystemd
import Glibc
package import HeraldEventLoop

/// A D-Bus argument value, for the few signatures Herald's D-Bus plugins send.
package enum DBusValue: Sendable, Hashable {
    case string(String)
    case uint32(UInt32)
    case int32(Int32)
    case int64(Int64)
    case byte(UInt8)
    case boolean(Bool)
    case stringArray([String])
    /// `ay`: a byte array.
    case bytes([UInt8])
    /// `a{sv}`: each value is sent as a variant.
    case dictionary([DBusEntry])

    package var signature: String {
        switch self {
        case .string: "s"
        case .uint32: "u"
        case .int32: "i"
        case .int64: "x"
        case .byte: "y"
        case .boolean: "b"
        case .stringArray: "as"
        case .bytes: "ay"
        case .dictionary: "a{sv}"
        }
    }
}

/// One entry of an `a{sv}` dictionary.
package struct DBusEntry: Sendable, Hashable {
    package var key: String
    package var value: DBusValue

    package init(_ key: String, _ value: DBusValue) {
        self.key = key
        self.value = value
    }
}

/// A failed method call: the error the peer (or sd-bus, for a timeout or a lost connection) answered.
package struct DBusCallError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The D-Bus error name (`org.freedesktop.DBus.Error.ServiceUnknown`, ...).
    package var name: String
    package var message: String

    package static let disconnected = DBusCallError(
        name: "org.freedesktop.DBus.Error.Disconnected", message: "the bus connection was closed")

    /// The peer went away, or was never there: worth trying again with the next service.
    package var isUnreachable: Bool {
        [
            "org.freedesktop.DBus.Error.Disconnected", "org.freedesktop.DBus.Error.NoReply", "org.freedesktop.DBus.Error.ServiceUnknown",
            "org.freedesktop.DBus.Error.NameHasNoOwner", "org.freedesktop.DBus.Error.Spawn.ChildExited",
            "org.freedesktop.DBus.Error.Spawn.ExecFailed", "org.freedesktop.DBus.Error.TimedOut",
        ].contains(name)
    }

    package var description: String { "\(name): \(message)" }
}

/// Why a connection could not be made.
package struct DBusConnectError: Error, Sendable, CustomStringConvertible {
    package var address: String
    package var operation: String
    package var code: Int32

    package var description: String { "cannot \(operation) \(address): \(String(cString: strerror(code)))" }
}

/// A received message (a reply or a signal), read in order; valid only inside the callback that got it.
package struct DBusMessage {
    package let raw: OpaquePointer

    package var sender: String? { sd_bus_message_get_sender(raw).map { String(cString: $0) } }
    package var member: String? { sd_bus_message_get_member(raw).map { String(cString: $0) } }
    package var interface: String? { sd_bus_message_get_interface(raw).map { String(cString: $0) } }

    package func string() -> String? {
        var value: UnsafePointer<CChar>?
        guard sd_bus_message_read_basic(raw, code("s"), &value) > 0, let value else { return nil }
        return String(cString: value)
    }

    package func boolean() -> Bool? {
        var value: Int32 = 0
        guard sd_bus_message_read_basic(raw, code("b"), &value) > 0 else { return nil }
        return value != 0
    }

    package func uint32() -> UInt32? {
        var value: UInt32 = 0
        guard sd_bus_message_read_basic(raw, code("u"), &value) > 0 else { return nil }
        return value
    }

    /// The message's object path.
    package var path: String? { sd_bus_message_get_path(raw).map { String(cString: $0) } }

    /// Reads an `a{sv}` dictionary; of the values, strings and byte arrays are kept, others skipped.
    package func dictionary() -> [String: DBusValue]? {
        guard sd_bus_message_enter_container(raw, code("a"), "{sv}") > 0 else { return nil }
        var entries: [String: DBusValue] = [:]
        while sd_bus_message_enter_container(raw, code("e"), "sv") > 0 {
            guard let key = string() else { return nil }
            var type: CChar = 0
            var contents: UnsafePointer<CChar>?
            guard sd_bus_message_peek_type(raw, &type, &contents) > 0, let contents else { return nil }
            let signature = String(cString: contents)
            guard sd_bus_message_enter_container(raw, code("v"), contents) > 0 else { return nil }
            switch signature {
            case "s": entries[key] = string().map(DBusValue.string)
            case "ay": entries[key] = bytes().map(DBusValue.bytes)
            default: guard sd_bus_message_skip(raw, contents) >= 0 else { return nil }
            }
            guard sd_bus_message_exit_container(raw) >= 0, sd_bus_message_exit_container(raw) >= 0 else { return nil }
        }
        guard sd_bus_message_exit_container(raw) >= 0 else { return nil }
        return entries
    }

    /// Reads an `ay` byte array.
    package func bytes() -> [UInt8]? {
        var pointer: UnsafeRawPointer?
        var size = 0
        guard sd_bus_message_read_array(raw, code("y"), &pointer, &size) >= 0 else { return nil }
        guard let pointer, size > 0 else { return [] }
        return Array(UnsafeRawBufferPointer(start: pointer, count: size))
    }

    package func stringArray() -> [String]? {
        guard sd_bus_message_enter_container(raw, code("a"), "s") > 0 else { return nil }
        var values: [String] = []
        while let value = string() { values.append(value) }
        guard sd_bus_message_exit_container(raw) >= 0 else { return nil }
        return values
    }
}

/// A method call received on an object added with ``DBusConnection/addObject(path:handler:)``, kept (referenced) so
/// that it can be answered later, once: with ``reply(_:)`` or ``fail(name:message:)``. Loop thread only.
package final class DBusIncomingCall {
    private let raw: OpaquePointer
    private var answered = false

    init(_ message: OpaquePointer) {
        raw = sd_bus_message_ref(message)
    }

    deinit { sd_bus_message_unref(raw) }

    /// The call's message, to read its arguments.
    package var message: DBusMessage { DBusMessage(raw: raw) }

    /// Whether the caller waits for an answer.
    package var expectsReply: Bool { sd_bus_message_get_expect_reply(raw) > 0 }

    /// Answers with `arguments`.
    package func reply(_ arguments: [DBusValue]) {
        guard !answered else { return }
        answered = true
        var reply: OpaquePointer?
        guard sd_bus_message_new_method_return(raw, &reply) >= 0, let reply else { return }
        defer { sd_bus_message_unref(reply) }
        guard DBusConnection.append(arguments, to: reply) >= 0 else { return }
        sd_bus_send(nil, reply, nil)
    }

    /// Answers with the D-Bus error `name` (`org.freedesktop.DBus.Error.InvalidArgs`, ...).
    package func fail(name: String, message text: String) {
        guard !answered else { return }
        answered = true
        name.withCString { name in
            text.withCString { text in
                var error = sd_bus_error(name: name, message: text, _need_free: 0)
                _ = sd_bus_reply_method_error(raw, &error)
            }
        }
    }
}

/// The session bus to connect to: `configured` when given and not empty, else `DBUS_SESSION_BUS_ADDRESS`, else
/// `$XDG_RUNTIME_DIR/bus`; `nil` when none of them is set.
package func sessionBusAddress(configured: String?) -> String? {
    if let configured, !configured.isEmpty { return configured }
    if let address = getenv("DBUS_SESSION_BUS_ADDRESS").map({ String(cString: $0) }), !address.isEmpty { return address }
    if let runtime = getenv("XDG_RUNTIME_DIR").map({ String(cString: $0) }), !runtime.isEmpty { return "unix:path=\(runtime)/bus" }
    return nil
}

/// The type code `character` as sd-bus takes it.
private func code(_ character: Unicode.Scalar) -> CChar { CChar(UInt8(ascii: character)) }

/// One client connection to a bus with sd-bus, driven by the Herald loop: a `uv_poll_t` on the connection's socket
/// for the events sd-bus asks for and a `uv_timer_t` for its next timeout; each wake-up runs `sd_bus_process` until
/// it has nothing left. Everything happens on the loop thread: no thread of its own, no blocking call (connecting
/// and authenticating proceed as the socket allows).
package final class DBusConnection {
    package typealias Reply = (Result<DBusMessage, DBusCallError>) -> Void

    package let loop: EventLoop
    package let address: String
    /// A signal arrived (one of the matches added with ``addMatch(_:)``).
    package var onSignal: (DBusMessage) -> Void = { _ in }
    /// The connection broke; it is closed when this runs.
    package var onLost: (String) -> Void = { _ in }

    private var bus: OpaquePointer?
    private var poll: ExternalHandle?
    private var timer: ExternalHandle?
    private var replies: [UInt64: Reply] = [:]
    private var objectHandlers: [String: (DBusIncomingCall) -> Bool] = [:]
    private var processing = false
    private var closeRequested = false
    private var polledEvents: Int32 = -1
    /// Told once sd-bus has written everything queued (``whenWritten(_:)``): `true`, or `false` when it closed first.
    private var writtenWaiters: [(Bool) -> Void] = []

    /// Starts connecting to `address` (a D-Bus address, `unix:path=...`): sends `Hello` once authenticated. Throws
    /// when the address cannot be reached now (no socket there, refused). Call on the loop thread.
    package init(loop: EventLoop, address: String) throws {
        self.loop = loop
        self.address = address
        var bus: OpaquePointer?
        try Self.check(sd_bus_new(&bus), "create a bus connection for", address)
        self.bus = bus
        do {
            try Self.check(sd_bus_set_address(bus, address), "use the bus address", address)
            try Self.check(sd_bus_set_bus_client(bus, 1), "configure the bus connection to", address)
            try Self.check(sd_bus_start(bus), "connect to", address)
            let fd = sd_bus_get_fd(bus)
            try Self.check(fd, "get the socket of", address)
            let poll = try ExternalHandle(loop: loop, byteCount: MemoryLayout<uv_poll_t>.size, operation: "poll the bus socket") {
                uv, raw in
                uv_poll_init(uv, raw.assumingMemoryBound(to: uv_poll_t.self), fd)
            }
            poll.context = self
            self.poll = poll
            let timer = try ExternalHandle(loop: loop, byteCount: MemoryLayout<uv_timer_t>.size, operation: "create the bus timer") {
                uv, raw in
                uv_timer_init(uv, raw.assumingMemoryBound(to: uv_timer_t.self))
            }
            timer.context = self
            self.timer = timer
        } catch {
            close()
            throw error
        }
        update()
    }

    private static func check(_ result: Int32, _ operation: String, _ address: String) throws {
        if result < 0 { throw DBusConnectError(address: address, operation: operation, code: -result) }
    }

    package var isOpen: Bool { bus != nil }

    /// Receives the signals `rule` matches (a D-Bus match rule), through ``onSignal``.
    package func addMatch(_ rule: String) {
        guard let bus else { return }
        let result = sd_bus_add_match_async(
            bus, nil, rule,
            { message, userdata, _ in
                let connection = Unmanaged<DBusConnection>.fromOpaque(userdata!).takeUnretainedValue()
                connection.onSignal(DBusMessage(raw: message!))
                return 0
            }, nil, Unmanaged.passUnretained(self).toOpaque())
        if result < 0 {
            lose("cannot add a match rule: \(String(cString: strerror(-result)))")
            return
        }
        kick()
    }

    /// Takes the method calls to `path`: `handler` runs on the loop thread for each and answers whether it took it
    /// (a call it does not take is answered `UnknownMethod` by sd-bus).
    package func addObject(path: String, handler: @escaping (DBusIncomingCall) -> Bool) {
        guard let bus else { return }
        objectHandlers[path] = handler
        let result = sd_bus_add_object(
            bus, nil, path,
            { message, userdata, _ in
                let connection = Unmanaged<DBusConnection>.fromOpaque(userdata!).takeUnretainedValue()
                let call = DBusIncomingCall(message!)
                guard let path = call.message.path, let handler = connection.objectHandlers[path] else { return 0 }
                return handler(call) ? 1 : 0
            }, Unmanaged.passUnretained(self).toOpaque())
        if result < 0 {
            lose("cannot add the object \(path): \(String(cString: strerror(-result)))")
            return
        }
        kick()
    }

    /// Runs `body` on the loop's next turn if this connection is still open then. For what a failed call concludes
    /// (a service absent, a name refused): a call that fails because the connection was lost fails first and the
    /// loss is reported just after, in the same turn, so the conclusion gives way to ``onLost``, which reports the
    /// loss as such; likewise when the connection's owner closed it meanwhile. Loop thread only.
    package func nextTurnIfOpen(_ body: @escaping () -> Void) {
        let bound = LoopBound((connection: self, body: body), loop: loop)
        loop.execute {
            let (connection, body) = bound.value
            if connection.isOpen { body() }
        }
    }

    /// Runs sd-bus now: what a handler answered outside sd-bus's own processing (a deferred reply) is sent.
    package func flush() { kick() }

    /// Calls `member`; `reply` runs on the loop thread with the reply or the error (a timeout after `timeout`, or
    /// ``DBusCallError/disconnected`` when the connection closes first).
    package func call(
        destination: String, path: String, interface: String, member: String, arguments: [DBusValue] = [], timeout: Duration,
        reply: @escaping Reply
    ) {
        guard let bus else { return reply(.failure(.disconnected)) }
        var message: OpaquePointer?
        var result = sd_bus_message_new_method_call(bus, &message, destination, path, interface, member)
        if result >= 0, let message {
            result = Self.append(arguments, to: message)
            if result >= 0 {
                let microseconds = UInt64(
                    max(1, timeout.components.seconds * 1_000_000 + timeout.components.attoseconds / 1_000_000_000_000))
                result = sd_bus_call_async(
                    bus, nil, message,
                    { message, userdata, _ in
                        Unmanaged<DBusConnection>.fromOpaque(userdata!).takeUnretainedValue().didReply(DBusMessage(raw: message!))
                        // Handled. sd-bus passes this on as `sd_bus_process`'s result when it fails the pending calls
                        // of a lost connection: 0 would say "nothing done" there.
                        return 1
                    }, Unmanaged.passUnretained(self).toOpaque(), microseconds)
                var cookie: UInt64 = 0
                if result >= 0, sd_bus_message_get_cookie(message, &cookie) >= 0 { replies[cookie] = reply }
            }
        }
        if let message { sd_bus_message_unref(message) }
        if result < 0 {
            reply(
                .failure(
                    DBusCallError(
                        name: "org.freedesktop.DBus.Error.Failed", message: "cannot send \(member): \(String(cString: strerror(-result)))"))
            )
            return
        }
        kick()
    }

    /// Sends a call to `member` that asks for no answer (the `NO_REPLY_EXPECTED` flag): nothing comes back, not even
    /// an error, and the bus drops it unseen when nobody owns `destination` and nobody can be started for it. Whether
    /// it could be queued for sending.
    @discardableResult
    package func send(destination: String, path: String, interface: String, member: String, arguments: [DBusValue] = []) -> Bool {
        guard let bus else { return false }
        var message: OpaquePointer?
        var result = sd_bus_message_new_method_call(bus, &message, destination, path, interface, member)
        if result >= 0, let message {
            result = sd_bus_message_set_expect_reply(message, 0)
            if result >= 0 { result = Self.append(arguments, to: message) }
            if result >= 0 { result = sd_bus_send(bus, message, nil) }
        }
        if let message { sd_bus_message_unref(message) }
        guard result >= 0 else { return false }
        kick()
        return true
    }

    /// Messages queued but not written to the socket yet (it was full): sd-bus writes them as the socket takes them.
    package var queuedWrites: UInt64 {
        guard let bus else { return 0 }
        var count: UInt64 = 0
        return sd_bus_get_n_queued_write(bus, &count) >= 0 ? count : 0
    }

    /// Runs `body` on the loop thread once every message queued so far is written to the socket, with `true` (at
    /// once when none waits), or with `false` when the connection closes first (what was queued may not have been
    /// written). Loop thread only.
    package func whenWritten(_ body: @escaping (Bool) -> Void) {
        guard bus != nil else { return body(false) }
        guard queuedWrites > 0 else { return body(true) }
        writtenWaiters.append(body)
    }

    /// Emits a signal from this connection.
    package func emitSignal(path: String, interface: String, member: String, arguments: [DBusValue]) {
        guard let bus else { return }
        var message: OpaquePointer?
        var result = sd_bus_message_new_signal(bus, &message, path, interface, member)
        if result >= 0, let message {
            result = Self.append(arguments, to: message)
            if result >= 0 { result = sd_bus_send(bus, message, nil) }
        }
        if let message { sd_bus_message_unref(message) }
        if result >= 0 { kick() }
    }

    private func didReply(_ message: DBusMessage) {
        var cookie: UInt64 = 0
        guard sd_bus_message_get_reply_cookie(message.raw, &cookie) >= 0, let reply = replies.removeValue(forKey: cookie) else { return }
        if sd_bus_message_is_method_error(message.raw, nil) > 0, let error = sd_bus_message_get_error(message.raw) {
            let name = error.pointee.name.map { String(cString: $0) } ?? "org.freedesktop.DBus.Error.Failed"
            reply(.failure(DBusCallError(name: name, message: error.pointee.message.map { String(cString: $0) } ?? "")))
        } else {
            reply(.success(message))
        }
    }

    // MARK: Loop integration

    /// Runs sd-bus until it has nothing left to do, then waits for what it needs next. Not reentrant: a call
    /// from inside one of its callbacks is left to the running pass.
    ///
    /// A lost connection is seen through in one pass: sd-bus fails the pending calls one per `sd_bus_process`, then
    /// closes, and the pass ends in ``onLost``. So a pending call's failure and the loss come in the same turn of the
    /// loop, the failure first: what a caller defers to the next turn finds the connection already lost.
    private func kick() {
        guard let bus, !processing else { return }
        processing = true
        while true {
            let result = sd_bus_process(bus, nil)
            if result < 0 {
                processing = false
                lose(String(cString: strerror(-result)))
                return
            }
            if closeRequested { break }
            // 0 is "nothing to do" while the connection is open; closing, sd-bus goes on until it reports the loss.
            if result == 0, sd_bus_is_open(bus) > 0 { break }
        }
        processing = false
        if closeRequested {
            close()
            return
        }
        update()
    }

    private func update() {
        guard let bus, let poll, let timer else { return }
        let events = sd_bus_get_events(bus)
        if events < 0 {
            lose(String(cString: strerror(-events)))
            return
        }
        if !writtenWaiters.isEmpty, queuedWrites == 0 {
            let waiters = writtenWaiters
            writtenWaiters = []
            for waiter in waiters { waiter(true) }
            // A waiter may have closed the connection.
            guard self.bus != nil else { return }
        }
        var wanted: Int32 = 0
        if events & Int32(POLLIN) != 0 { wanted |= Int32(UV_READABLE.rawValue) }
        if events & Int32(POLLOUT) != 0 { wanted |= Int32(UV_WRITABLE.rawValue) }
        if wanted != polledEvents {
            polledEvents = wanted
            uv_poll_start(poll.pointer.assumingMemoryBound(to: uv_poll_t.self), wanted) { handle, _, _ in
                (ExternalHandle.owner(of: UnsafeMutableRawPointer(handle!)).context as? DBusConnection)?.kick()
            }
        }
        var deadline: UInt64 = 0
        let uvTimer = timer.pointer.assumingMemoryBound(to: uv_timer_t.self)
        if sd_bus_get_timeout(bus, &deadline) > 0, deadline != UInt64.max {
            var now = timespec()
            clock_gettime(CLOCK_MONOTONIC, &now)
            let nowMicroseconds = UInt64(now.tv_sec) * 1_000_000 + UInt64(now.tv_nsec) / 1000
            let delay = deadline > nowMicroseconds ? (deadline - nowMicroseconds + 999) / 1000 : 0
            uv_timer_start(
                uvTimer,
                { handle in
                    (ExternalHandle.owner(of: UnsafeMutableRawPointer(handle!)).context as? DBusConnection)?.kick()
                }, delay, 0)
        } else {
            uv_timer_stop(uvTimer)
        }
    }

    private func lose(_ reason: String) {
        close()
        onLost(reason)
    }

    /// Closes the connection: pending calls fail with ``DBusCallError/disconnected``. Idempotent.
    package func close() {
        if processing {
            closeRequested = true
            return
        }
        objectHandlers = [:]
        poll?.close()
        poll = nil
        timer?.close()
        timer = nil
        if let bus {
            self.bus = nil
            sd_bus_close_unref(bus)
        }
        let failed = replies
        replies = [:]
        for reply in failed.values { reply(.failure(.disconnected)) }
        let waiters = writtenWaiters
        writtenWaiters = []
        for waiter in waiters { waiter(false) }
    }

    // MARK: Writing arguments

    static func append(_ values: [DBusValue], to message: OpaquePointer) -> Int32 {
        for value in values {
            let result = append(value, to: message)
            if result < 0 { return result }
        }
        return 0
    }

    private static func append(_ value: DBusValue, to message: OpaquePointer) -> Int32 {
        switch value {
        case .string(let string):
            return string.withCString { sd_bus_message_append_basic(message, code("s"), $0) }
        case .uint32(var number):
            return sd_bus_message_append_basic(message, code("u"), &number)
        case .int32(var number):
            return sd_bus_message_append_basic(message, code("i"), &number)
        case .int64(var number):
            return sd_bus_message_append_basic(message, code("x"), &number)
        case .byte(var number):
            return sd_bus_message_append_basic(message, code("y"), &number)
        case .boolean(let flag):
            var number: Int32 = flag ? 1 : 0
            return sd_bus_message_append_basic(message, code("b"), &number)
        case .bytes(let bytes):
            return bytes.withUnsafeBytes { sd_bus_message_append_array(message, code("y"), $0.baseAddress, $0.count) }
        case .stringArray(let strings):
            var result = sd_bus_message_open_container(message, code("a"), "s")
            for string in strings where result >= 0 { result = append(.string(string), to: message) }
            return result < 0 ? result : sd_bus_message_close_container(message)
        case .dictionary(let entries):
            var result = sd_bus_message_open_container(message, code("a"), "{sv}")
            for entry in entries where result >= 0 {
                result = sd_bus_message_open_container(message, code("e"), "sv")
                if result >= 0 { result = append(.string(entry.key), to: message) }
                if result >= 0 { result = sd_bus_message_open_container(message, code("v"), entry.value.signature) }
                if result >= 0 { result = append(entry.value, to: message) }
                if result >= 0 { result = sd_bus_message_close_container(message) }
                if result >= 0 { result = sd_bus_message_close_container(message) }
            }
            return result < 0 ? result : sd_bus_message_close_container(message)
        }
    }
}
