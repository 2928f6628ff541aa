import CCurl
import CLibUV
import HeraldEventLoop

/// curl's process-wide state, set up once before the first multi handle (thread-safe in the curl Debian ships).
private let curlGlobalInit: CURLcode = curl_global_init(Int(CURL_GLOBAL_DEFAULT))

/// One curl multi handle driven by the loop: curl says which sockets to watch (its socket callback: a `uv_poll` per
/// socket) and when to call it back (its timer callback: one `uv_timer`); the loop tells curl what became ready with
/// `curl_multi_socket_action`. Finished transfers are collected after each call.
///
/// The timer is created with the multi handle, on the first request; the loop's shutdown reaches the engine through
/// it (``close()``), so no request is left waiting. The timer's handle holds the engine (its `context`) while open:
/// curl's callbacks get the engine unretained.
final class CurlEngine: @unchecked Sendable {
    // @unchecked Sendable: `counters` is behind a lock; every other member is used on the loop thread only.
    private let loop: EventLoop
    private let configuration: HTTPClient.Configuration
    private var multi: UnsafeMutableRawPointer?
    private var timer: ExternalHandle?
    private var sockets: [curl_socket_t: ExternalHandle] = [:]
    private var transfers: [UnsafeMutableRawPointer: CurlTransfer] = [:]
    private var closed = false
    private let counters = Locked(HTTPClient.Statistics())

    init(loop: EventLoop, configuration: HTTPClient.Configuration) {
        self.loop = loop
        self.configuration = configuration
    }

    var statistics: HTTPClient.Statistics { counters.withLock { $0 } }

    /// Starts `transfer`, or ends it at once when the client is closed or the transfer cancelled. Loop thread.
    func add(_ transfer: CurlTransfer) {
        loop.preconditionInEventLoop()
        guard !closed else { return end(transfer, EventLoopError.shutDown) }
        guard !transfer.isCancelled else { return end(transfer, CancellationError()) }
        do {
            let multi = try openMulti()
            let easy = try transfer.makeEasyHandle(configuration: configuration)
            transfers[easy] = transfer
            let added = curl_multi_add_handle(multi, easy)
            if added != CURLM_OK {
                transfers[easy] = nil
                end(transfer, HTTPClientError.failed(transfer.request.url.description, detail: String(cString: curl_multi_strerror(added))))
            }
        } catch {
            end(transfer, error)
        }
    }

    /// Abandons `transfer` if it is under way: it ends with `CancellationError`. Loop thread.
    func cancel(_ transfer: CurlTransfer) {
        loop.preconditionInEventLoop()
        guard let easy = transfer.easy, transfers.removeValue(forKey: easy) != nil else { return }  // add() will see the flag
        if let multi { curl_multi_remove_handle(multi, easy) }
        end(transfer, CancellationError())
    }

    /// Ends every transfer with `EventLoopError.shutDown`, closes the kept connections, the watched sockets and the
    /// timer. Idempotent. Loop thread.
    func close() {
        loop.preconditionInEventLoop()
        guard !closed else { return }
        closed = true
        let abandoned = transfers
        transfers = [:]
        for (easy, transfer) in abandoned {
            if let multi { curl_multi_remove_handle(multi, easy) }
            end(transfer, EventLoopError.shutDown)
        }
        if let multi {
            self.multi = nil
            curl_multi_cleanup(multi)
        }
        for (_, socket) in sockets where !socket.isClosed {
            uv_poll_stop(socket.pointer.assumingMemoryBound(to: uv_poll_t.self))
            socket.close()
        }
        sockets = [:]
        if let timer, !timer.isClosed { timer.close() }
        timer = nil
        counters.withLock { $0.watchedSockets = 0 }
    }

    // MARK: The multi handle and its callbacks

    private func openMulti() throws -> UnsafeMutableRawPointer {
        if let multi { return multi }
        if let failure = herald_curl_load_failure() {  // libcurl is loaded here, at the first request
            throw HTTPClientError.failed("curl", detail: String(cString: failure))
        }
        guard curlGlobalInit == CURLE_OK else {
            throw HTTPClientError.failed("curl", detail: "curl_global_init failed: \(String(cString: curl_easy_strerror(curlGlobalInit)))")
        }
        let timer = try ExternalHandle(loop: loop, byteCount: MemoryLayout<uv_timer_t>.size, operation: "create the HTTP client's timer") {
            uv_timer_init($0, $1.assumingMemoryBound(to: uv_timer_t.self))
        }
        guard let multi = curl_multi_init() else {
            timer.close()
            throw HTTPClientError.failed("curl", detail: "curl_multi_init failed")
        }
        timer.context = self
        timer.onShutdown = { [unowned self] in close() }
        let engine = Unmanaged.passUnretained(self).toOpaque()
        _ = herald_curl_multi_setopt_socket_function(multi) { _, socket, what, engine, _ in
            Unmanaged<CurlEngine>.fromOpaque(engine!).takeUnretainedValue().watch(socket, what: what)
            return 0
        }
        _ = herald_curl_multi_setopt_pointer(multi, CURLMOPT_SOCKETDATA, engine)
        _ = herald_curl_multi_setopt_timer_function(multi) { _, milliseconds, engine in
            Unmanaged<CurlEngine>.fromOpaque(engine!).takeUnretainedValue().setTimer(milliseconds)
            return 0
        }
        _ = herald_curl_multi_setopt_pointer(multi, CURLMOPT_TIMERDATA, engine)
        _ = herald_curl_multi_setopt_long(multi, CURLMOPT_MAX_HOST_CONNECTIONS, configuration.maximumConnectionsPerHost)
        // curl's default keeps 4 connections per transfer under way: between bursts it would close what the next
        // burst needs. Keep what the per-host limit allows, for a few hosts.
        _ = herald_curl_multi_setopt_long(multi, CURLMOPT_MAXCONNECTS, max(configuration.maximumConnectionsPerHost, 16) * 4)
        self.timer = timer
        self.multi = multi
        return multi
    }

    /// curl's socket callback: watch `socket` for `what` (`CURL_POLL_IN`, `_OUT`, `_INOUT`), or stop (`_REMOVE`).
    private func watch(_ socket: curl_socket_t, what: Int32) {
        if what == CURL_POLL_REMOVE {
            if let handle = sockets.removeValue(forKey: socket), !handle.isClosed {
                uv_poll_stop(handle.pointer.assumingMemoryBound(to: uv_poll_t.self))
                handle.close()
            }
            counters.withLock { $0.watchedSockets = sockets.count }
            return
        }
        guard !closed else { return }  // curl_multi_cleanup under way: nothing is watched any more
        var events: Int32 = 0
        if what & CURL_POLL_IN != 0 { events |= Int32(UV_READABLE.rawValue) }
        if what & CURL_POLL_OUT != 0 { events |= Int32(UV_WRITABLE.rawValue) }
        let handle: ExternalHandle
        if let existing = sockets[socket], !existing.isClosed {
            handle = existing
        } else {
            do {
                handle = try ExternalHandle(loop: loop, byteCount: MemoryLayout<uv_poll_t>.size, operation: "watch a socket") {
                    uv_poll_init_socket($0, $1.assumingMemoryBound(to: uv_poll_t.self), socket)
                }
            } catch {
                // The loop is closing: the shutdown ends the transfers.
                return
            }
            handle.context = self
            sockets[socket] = handle
            counters.withLock { $0.watchedSockets = sockets.count }
        }
        uv_poll_start(handle.pointer.assumingMemoryBound(to: uv_poll_t.self), events) { poll, status, events in
            let owner = ExternalHandle.owner(of: UnsafeMutableRawPointer(poll!))
            guard let engine = owner.context as? CurlEngine else { return }
            var descriptor: uv_os_fd_t = -1
            guard uv_fileno(herald_as_handle(poll), &descriptor) == 0 else { return }
            var flags: Int32 = 0
            if status < 0 {
                flags = CURL_CSELECT_ERR
            } else {
                if events & Int32(UV_READABLE.rawValue) != 0 { flags |= CURL_CSELECT_IN }
                if events & Int32(UV_WRITABLE.rawValue) != 0 { flags |= CURL_CSELECT_OUT }
            }
            engine.act(on: descriptor, flags: flags)
        }
    }

    /// curl's timer callback: call back in `milliseconds` (0: as soon as possible), or never (-1).
    private func setTimer(_ milliseconds: Int) {
        guard let timer, !timer.isClosed else { return }
        let handle = timer.pointer.assumingMemoryBound(to: uv_timer_t.self)
        guard milliseconds >= 0 else {
            uv_timer_stop(handle)
            return
        }
        uv_timer_start(
            handle,
            { timer in
                let owner = ExternalHandle.owner(of: UnsafeMutableRawPointer(timer!))
                (owner.context as? CurlEngine)?.act(on: CURL_SOCKET_TIMEOUT, flags: 0)
            }, UInt64(milliseconds), 0)
    }

    /// Tells curl that `socket` is ready (or that its timer fired), then collects the transfers that ended.
    private func act(on socket: curl_socket_t, flags: Int32) {
        guard let multi, !closed else { return }
        var running: Int32 = 0
        _ = curl_multi_socket_action(multi, socket, flags, &running)
        var left: Int32 = 0
        while let message = curl_multi_info_read(multi, &left) {
            guard message.pointee.msg == CURLMSG_DONE, let easy = message.pointee.easy_handle else { continue }
            let result = herald_curl_message_result(message)
            guard let transfer = transfers.removeValue(forKey: easy) else { continue }
            curl_multi_remove_handle(multi, easy)
            count(connectionsOpened: transfer.connectionsOpened)
            transfer.complete(result)
        }
    }

    /// Ends `transfer` with `error`, counted first (see ``count(connectionsOpened:)``).
    private func end(_ transfer: CurlTransfer, _ error: any Error) {
        count(connectionsOpened: transfer.connectionsOpened)
        transfer.finish(.failure(error))
    }

    /// Counts a transfer that ends, before its answer is handed over: the statistics are current once the awaiting
    /// task has it.
    private func count(connectionsOpened: Int) {
        counters.withLock {
            $0.completed += 1
            $0.connectionsOpened += connectionsOpened
        }
    }
}
