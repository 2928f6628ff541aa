import Herald

/// A small HTTP/1.1 endpoint on Herald's loop for scrapers: `GET /metrics` answers the text format
/// (`text/plain; version=0.0.4`), `GET /healthz` answers the receivers' health as JSON (200, or 503 when one is not
/// healthy), anything else 404 or 405. Requests carry no body
/// worth reading, so it reads the request head only (up to a limit: 431 past it), answers, and keeps the
/// connection for the next scrape unless the client said `Connection: close`. Silent connections are closed.
final class MetricsEndpoint {
    private let server: StreamServer
    private let context: PluginContext
    private let options: PrometheusExporter.Options
    private let render: () -> [UInt8]
    private let health: () -> (healthy: Bool, body: [UInt8])
    private var connections: [ObjectIdentifier: StreamConnection] = [:]

    var localAddress: SocketAddress { server.localAddress }

    init(
        context: PluginContext, options: PrometheusExporter.Options, render: @escaping () -> [UInt8],
        health: @escaping () -> (healthy: Bool, body: [UInt8])
    ) throws {
        self.context = context
        self.options = options
        self.render = render
        self.health = health
        var accept: ((StreamConnection) -> Void)?
        server = try StreamServer.listen(on: context.loop, at: options.address) { accept?($0) }
        accept = { [weak self] connection in self?.serve(connection) }
        server.logAcceptFailures(to: context.logger)
        context.logger.info("serving /metrics", metadata: ["address": "\(server.localAddress)", "tls": "\(options.tls != nil)"])
    }

    func close() {
        server.close()
        for connection in connections.values { connection.close() }
        connections.removeAll()
    }

    private func serve(_ connection: StreamConnection) {
        guard connections.count < options.maximumConnections else {
            context.logger.warning("too many scrape connections; closing the new one", metadata: ["limit": "\(options.maximumConnections)"])
            connection.close()
            return
        }
        let key = ObjectIdentifier(connection)
        connections[key] = connection
        var head: [UInt8] = []
        var idle: ScheduledTask?
        let loop = context.loop
        let timeout = options.idleTimeout
        func armIdle() {
            idle?.cancel()
            idle = loop.scheduleTask(in: timeout) { connection.close() }
        }
        connection.onClose = { [weak self] _ in
            idle?.cancel()
            self?.connections[key] = nil
        }
        // With TLS the handshake comes first; the callbacks below see the decrypted requests.
        options.tls?.secure(connection, applicationProtocols: ["http/1.1"], established: nil)
        connection.onEnd = { connection.close() }
        connection.onRead = { [weak self] bytes in
            guard let self else { return }
            armIdle()
            head.append(contentsOf: bytes)
            while let end = Self.endOfHead(head) {
                let request = String(decoding: head[..<end], as: UTF8.self)
                head.removeFirst(end + 4)
                let keepAlive = self.answer(request, on: connection)
                if !keepAlive {
                    connection.pauseReading()
                    connection.shutdownWriting { _ in connection.close() }
                    return
                }
            }
            if head.count > self.options.maximumRequestBytes {
                self.write(
                    connection, status: "431 Request Header Fields Too Large", type: "text/plain",
                    body: Array("request head too large\n".utf8), close: true)
                connection.pauseReading()
                connection.shutdownWriting { _ in connection.close() }
            }
        }
        armIdle()
        connection.startReading()
    }

    /// Answers one request; returns whether the connection stays open.
    private func answer(_ head: String, on connection: StreamConnection) -> Bool {
        let lines = head.split(separator: "\r\n", omittingEmptySubsequences: false)
        let parts = (lines.first ?? "").split(separator: " ")
        let close =
            lines.dropFirst().contains { $0.lowercased().hasPrefix("connection:") && $0.lowercased().contains("close") }
            || parts.last == "HTTP/1.0"
        guard parts.count == 3, parts[2].hasPrefix("HTTP/1.") else {
            write(connection, status: "400 Bad Request", type: "text/plain", body: Array("bad request\n".utf8), close: true)
            return false
        }
        let path = parts[1].split(separator: "?", maxSplits: 1).first.map(String.init) ?? ""
        switch (parts[0], path) {
        case ("GET", "/metrics"):
            write(connection, status: "200 OK", type: "text/plain; version=0.0.4; charset=utf-8", body: render(), close: close)
        case ("GET", "/healthz"):
            let (healthy, body) = health()
            write(connection, status: healthy ? "200 OK" : "503 Service Unavailable", type: "application/json", body: body, close: close)
        case (_, "/metrics"), (_, "/healthz"):
            write(
                connection, status: "405 Method Not Allowed", type: "text/plain", body: Array("use GET\n".utf8), close: close, allow: true)
        default:
            write(connection, status: "404 Not Found", type: "text/plain", body: Array("not found; try /metrics\n".utf8), close: close)
        }
        return !close
    }

    private func write(_ connection: StreamConnection, status: String, type: String, body: [UInt8], close: Bool, allow: Bool = false) {
        var head = "HTTP/1.1 \(status)\r\nContent-Type: \(type)\r\nContent-Length: \(body.count)\r\n"
        if allow { head += "Allow: GET\r\n" }
        if close { head += "Connection: close\r\n" }
        connection.write(Array((head + "\r\n").utf8) + body)
    }

    /// The index of the `\r\n\r\n` ending the first request head in `bytes`, if it is complete.
    private static func endOfHead(_ bytes: [UInt8]) -> Int? {
        guard bytes.count >= 4 else { return nil }
        for index in 0...(bytes.count - 4)
        where bytes[index] == 13 && bytes[index + 1] == 10 && bytes[index + 2] == 13 && bytes[index + 3] == 10 {
            return index
        }
        return nil
    }
}
