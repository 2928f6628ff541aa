import Foundation
import HeraldEventLoop
import HeraldHTTP
import HeraldTesting
import Testing

@Suite("HTTPRouter: routes by method and path pattern")
struct HTTPRouterTests {
    /// A router with a literal route, a parameter route, a `**` route, an open route and a bearer check.
    private static func router() -> HTTPRouter {
        let router = HTTPRouter()
        router.authorize = { request in
            request.headers["authorization"] == "Bearer s3cret" ? nil : .text(401, "who are you\n")
        }
        router.add(.get, "/healthz", open: true) { _, _, responder in responder.respond(.text(200, "ok")) }
        router.add(.post, "/v1/things/exact") { request, match, responder in
            responder.respond(.text(200, "exact \(match.segments.count) \(String(decoding: request.body, as: UTF8.self))"))
        }
        router.add(.post, "/v1/things/{name}") { _, match, responder in
            responder.respond(.text(200, "thing \(match["name"] ?? "?")"))
        }
        router.add(nil, "/v1/things/{name}", readsBody: false) { _, _, responder in
            responder.respond(.text(405, "use POST\n", headers: [("Allow", "POST")]))
        }
        router.add(nil, "/files/**") { _, match, responder in
            responder.respond(.text(200, "files \(match.segments.dropFirst().joined(separator: ","))"))
        }
        return router
    }

    private func ask(_ address: SocketAddress, _ method: String, _ target: String, secret: String? = "s3cret", body: String = "") throws
        -> Answer?
    {
        let client = try TestSocketClient(address)
        let authorization = secret.map { "Authorization: Bearer \($0)\r\n" } ?? ""
        client.send("\(method) \(target) HTTP/1.1\r\nHost: x\r\n\(authorization)Content-Length: \(body.utf8.count)\r\n\r\n\(body)")
        return answers(in: client.read { answers(in: $0).count >= 1 }).first
    }

    @Test("literal routes match the path exactly, query aside; parameters and ** match segments; first route wins")
    func matching() async throws {
        try await withHTTPServer(Self.router()) { address, _ async throws in
            #expect(try ask(address, "POST", "/v1/things/exact", body: "b")?.body == "exact 0 b")
            #expect(try ask(address, "POST", "/v1/things/exact?x=1", body: "b")?.body == "exact 0 b")
            #expect(try ask(address, "POST", "/v1/things/other")?.body == "thing other")
            #expect(try ask(address, "POST", "//v1//things/other?q")?.body == "thing other")
            #expect(try ask(address, "GET", "/files/a/b/c")?.body == "files a,b,c")
            #expect(try ask(address, "GET", "/files")?.body == "files ")
            let wrongMethod = try ask(address, "GET", "/v1/things/other")
            #expect(wrongMethod?.status == 405)
            #expect(wrongMethod?.headers["allow"] == "POST")
            let missing = try ask(address, "GET", "/nowhere?x")
            #expect(missing?.status == 404)
            #expect(missing?.body == "No route for GET /nowhere.\n")
        }
    }

    @Test("authorize is asked before every route but open ones, and before 404, so routes cannot be mapped without it")
    func authorization() async throws {
        try await withHTTPServer(Self.router()) { address, _ async throws in
            #expect(try ask(address, "GET", "/healthz", secret: nil)?.status == 200)
            #expect(try ask(address, "POST", "/v1/things/x", secret: nil)?.status == 401)
            #expect(try ask(address, "POST", "/v1/things/exact", secret: "wrong")?.status == 401)
            #expect(try ask(address, "GET", "/nowhere", secret: nil)?.status == 401)
        }
    }

    @Test("from the head (Expect: 100-continue): refusals answered without the body, routes that read it go on")
    func fromTheHead() async throws {
        try await withHTTPServer(Self.router()) { address, _ async throws in
            for (target, secret, interim, status) in [
                ("/v1/things/x", "s3cret", true, 200), ("/v1/things/x", "wrong", false, 401), ("/nowhere", "s3cret", false, 404),
            ] {
                let client = try TestSocketClient(address)
                client.send(
                    "POST \(target) HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(secret)\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n"
                )
                let first = String(decoding: client.read { $0.count >= 12 }, as: UTF8.self)
                #expect(first.hasPrefix("HTTP/1.1 100 Continue") == interim, "\(target) \(secret): \(first)")
                if interim { client.send("ok") }
                let read = answers(in: Array(first.utf8) + client.read { answers(in: Array(first.utf8) + $0).count >= 1 })
                #expect(read.map(\.status) == [status], "\(target) \(secret)")
            }
            // GET with a body to a route that does not read it: answered from the head.
            let client = try TestSocketClient(address)
            client.send(
                "GET /v1/things/x HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer s3cret\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n")
            #expect(answers(in: client.read { answers(in: $0).count >= 1 }).map(\.status) == [405])
        }
    }

    @Test("reason phrases come from one table; the answer's fields are written in order")
    func reasonPhrases() {
        #expect(HTTPStatus.reasonPhrase(200) == "OK")
        #expect(HTTPStatus.reasonPhrase(431) == "Request Header Fields Too Large")
        #expect(HTTPStatus.reasonPhrase(599) == "Status")
        #expect(HTTPRequestError.bodyTooLarge(size: 20, limit: 10).status == 413)
        #expect(HTTPRequestError.unparsable("HPE_INVALID_METHOD").message == "Malformed HTTP request (HPE_INVALID_METHOD).")
    }
}
