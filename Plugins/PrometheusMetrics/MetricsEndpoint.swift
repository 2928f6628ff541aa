import Herald
import HeraldHTTP
import HeraldTLS

/// A small HTTP endpoint on Herald's loop for scrapers: `GET /metrics` answers the text format
/// (`text/plain; version=0.0.4`), `GET /healthz` answers the receivers' health as JSON (200, or 503 when one is not
/// healthy), anything else 404 or 405. HeraldHTTP's session serves it, with the HTTP receiver's strictness: a head
/// over the limit gets 431, a malformed request 400, and the connection stays for the next scrape unless the client
/// said `Connection: close`. Silent connections are closed.
final class MetricsEndpoint {
    private let server: StreamServer
    private let context: PluginContext
    private let limits: HTTPServerLimits
    private let tls: TLSServerContext?
    private let router = HTTPRouter()
    private var connections: [ObjectIdentifier: StreamConnection] = [:]

    var localAddress: SocketAddress { server.localAddress }

    init(
        context: PluginContext, options: PrometheusExporter.Options, render: @escaping () -> [UInt8],
        health: @escaping () -> (healthy: Bool, body: [UInt8])
    ) throws {
        self.context = context
        tls = options.tls
        // Scrapes carry no body worth reading: one as large as the head is allowed, no more.
        limits = HTTPServerLimits(
            maximumHeaderBytes: options.maximumRequestBytes, maximumBodyBytes: options.maximumRequestBytes,
            idleTimeout: options.idleTimeout, requestTimeout: options.idleTimeout, maximumConnections: options.maximumConnections)
        router.add(.get, "/metrics") { _, _, responder in
            responder.respond(HTTPResponse(status: 200, contentType: "text/plain; version=0.0.4; charset=utf-8", body: render()))
        }
        router.add(.get, "/healthz") { _, _, responder in
            let (healthy, body) = health()
            responder.respond(HTTPResponse(status: healthy ? 200 : 503, contentType: "application/json", body: body))
        }
        for path in ["/metrics", "/healthz"] {
            router.add(nil, path, readsBody: false) { _, _, responder in
                responder.respond(.text(405, "use GET\n", headers: [("Allow", "GET")]))
            }
        }
        router.notFound = { _, responder in responder.respond(.text(404, "not found; try /metrics\n")) }
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
        guard connections.count < limits.maximumConnections else {
            context.logger.warning("too many scrape connections; closing the new one", metadata: ["limit": "\(limits.maximumConnections)"])
            connection.close()
            return
        }
        let key = ObjectIdentifier(connection)
        connections[key] = connection
        let session = HTTP1Session(connection: connection, loop: context.loop, handler: router, limits: limits)
        connection.onClose = { [weak self] _ in
            session.closed()
            self?.connections[key] = nil
        }
        // With TLS the handshake comes first; the session sees the decrypted requests.
        tls?.secure(connection, applicationProtocols: ["http/1.1"], established: nil)
        session.start()
    }
}
