import Glibc
import Herald
import HeraldHTTP

// The receiver's API: its routes in HeraldHTTP's route table, `/healthz`, authorization, FCM v1 sends and APNs
// provider pushes. Topic management (FCM v1 and Instance ID) is in HTTPTopicRoutes.swift; the HTTP framing
// (parsing, limits, keep-alive, writing answers) is HeraldHTTP's.

/// What a receiver's connections are answered with: the routes, and the answers to requests the session refuses
/// itself in Google's error shape. One per started receiver, shared by its connections; loop thread only.
final class HTTPAPI: HTTPRequestHandler, @unchecked Sendable {
    // @unchecked Sendable: the topic routes' tasks capture it; they run on the loop (`executorPreference`), where
    // it is used, and what it holds is immutable after init.
    let context: PluginContext
    let options: HTTPReceiver.Options
    unowned let receiver: HTTPReceiver
    /// `/v1/projects/{project}/messages:send` for this instance's project: the route nearly every request takes.
    let sendPath: String
    /// `sendPath` as bytes, to recognise the request nearly every request is without making Strings of it.
    private let sendPathBytes: [UInt8]
    /// Writes the answers to accepted sends (the project's part made once).
    private let sendAnswers: FCMSendResponseWriter
    private let router = HTTPRouter()
    /// Who the request being routed is from: set by ``authorization(_:)``, which the router (or ``handle(_:responder:)``)
    /// calls just before the route, on the same thread at once; read by the route through ``refusal(needing:)``.
    private var caller = Caller.everything
    /// The provider certificate of the connection the request being routed came on: set by
    /// ``ProviderCertificateConnection`` around the call, on the same thread; read by the APNs route.
    var providerCertificate: APNsProviderCertificate?
    /// Whether the APNs route authenticates providers as APNs does (a provider token, or a provider certificate when
    /// client certificates are required), answering APNs' 403 reasons instead of the secret's 401.
    private var apnsAuthentication: Bool { receiver.apnsTokens != nil || options.tls?.configuration.clientCAFile != nil }

    init(receiver: HTTPReceiver, context: PluginContext) {
        self.receiver = receiver
        self.options = receiver.options
        self.context = context
        self.sendPath = "/v1/projects/\(context.projectID)/messages:send"
        self.sendPathBytes = Array(sendPath.utf8)
        self.sendAnswers = FCMSendResponseWriter(project: context.projectID)
        addRoutes()
    }

    func handle(_ request: HTTPRequest, responder: HTTPResponder) {
        // The request nearly every request is, recognised from its bytes before the route table, which would find
        // the same route (the second) at some cost.
        if request.method == .post, Self.same(request.targetBytes, sendPathBytes) {
            if let refusal = authorization(request) { return responder.respond(refusal) }
            return send(request, project: context.projectID, responder: responder)
        }
        router.handle(request, responder: responder)
    }

    /// Whether `bytes` are `other`, compared whole by `memcmp` (`Array`'s `==` compares element by element).
    private static func same(_ bytes: [UInt8], _ other: [UInt8]) -> Bool {
        bytes.count == other.count
            && bytes.withUnsafeBytes { bytes in
                other.withUnsafeBytes { other in bytes.isEmpty || memcmp(bytes.baseAddress!, other.baseAddress!, bytes.count) == 0 }
            }
    }

    func handleHead(_ request: HTTPRequest, responder: HTTPResponder) -> Bool { router.handleHead(request, responder: responder) }

    func response(to error: HTTPRequestError) -> HTTPResponse {
        switch error {
        case .unparsable, .malformed: .json(400, googleError(400, "INVALID_ARGUMENT", error.message))
        case .headerTooLarge: .json(431, limitError(431, error.message))
        case .bodyTooLarge(let size, let limit):
            .json(413, limitError(413, MessageError(.payloadTooLarge(size: size, limit: limit)).message))
        case .timedOut: .json(408, googleError(408, "DEADLINE_EXCEEDED", error.message))
        case .unsupportedExpectation: .json(417, googleError(417, "FAILED_PRECONDITION", error.message))
        }
    }

    /// The routes, tried in this order. `/healthz` needs no secret; everything else does, a request no route takes
    /// included. A gateway passes sends on, and topic management when its forwarder is a `TopicForwarder` (each
    /// token's change made by the instance that holds it); what would act on one instance only (APNs pushes to its
    /// token) is answered 501 there.
    private func addRoutes() {
        // The router is this API's alone and is only called through it, so the routes' references to the API are
        // valid whenever they run: unowned(unsafe), as checking them (swift_unownedRetainStrong) cost on every request.
        router.authorize = { [unowned(unsafe) self] request in authorization(request) }
        router.add(.get, "/healthz", open: true) { [unowned(unsafe) self] _, _, responder in
            let ready = !context.bus.isDraining
            respond(responder, status: ready ? 200 : 503, body: ["status": .string(ready ? "ready" : "draining")])
        }
        // The request nearly every request is, matched whole from its bytes.
        router.add(.post, sendPath) { [unowned(unsafe) self] request, _, responder in
            send(request, project: context.projectID, responder: responder)
        }
        if let tokens = receiver.serviceAccountTokens {
            router.add(.post, "/token", open: true) { [unowned(unsafe) self] request, _, responder in
                routeToken(request, tokens: tokens, responder: responder)
            }
        }
        if let endpoint = options.webPush {
            // An app server knows its endpoint's URL, not the receiver's secret. A gateway's endpoint passes pushes on.
            router.add(nil, "/up/{token}", open: true) { [unowned(unsafe) self] request, match, responder in
                routeWebPush(request, token: String(match["token"] ?? ""), endpoint: endpoint, responder: responder)
            }
        }
        // Topic management: this instance's, or passed on by a gateway whose forwarder can (``topicChanger``).
        if options.forwarder == nil || options.forwarder is any TopicForwarder {
            for (path, add) in [("/iid/v1:batchAdd", true), ("/iid/v1:batchRemove", false)] {
                router.add(nil, path) { [unowned(unsafe) self] request, _, responder in
                    routeInstanceID(request, add: add, responder: responder)
                }
            }
            router.add(nil, "/v1/projects/{project}/registrations/{token}/topicSubscriptions/**") {
                [unowned(unsafe) self] request, match, responder in
                routeTopics(request, parts: match.segments.map(String.init), responder: responder)
            }
            router.add(nil, "/iid/info/{token}") { [unowned(unsafe) self] request, match, responder in
                routeInstanceIDInfo(request, token: HTTPAPI.percentDecoded(String(match["token"] ?? "")), responder: responder)
            }
        }
        if options.forwarder != nil {
            let forwardsTopics = options.forwarder is any TopicForwarder
            let topics =
                forwardsTopics ? ", topic management (POST /iid/v1:batchAdd and :batchRemove, GET /iid/info, .../topicSubscriptions)" : ""
            let rest = forwardsTopics ? "APNs pushes" : "topic management, APNs pushes"
            router.notFound = { [unowned(unsafe) self] _, responder in
                let message =
                    "This Herald is a gateway: it forwards POST /v1/projects/{project}/messages:send\(topics) (and POST /up/{token} when it takes UnifiedPush pushes) only. Ask the instances themselves for the rest (\(rest))."
                respond(responder, status: 501, body: googleError(501, "UNIMPLEMENTED", message))
            }
        } else {
            // With APNs provider keys or client certificates, the APNs route checks its own authorization (a provider
            // certificate, a provider token, or the secret).
            router.add(nil, "/3/device/{token}", open: apnsAuthentication) { [unowned(unsafe) self] request, match, responder in
                routeAPNs(request, deviceToken: String(match["token"] ?? ""), responder: responder)
            }
            router.notFound = { [unowned(unsafe) self] request, responder in
                respond(
                    responder, status: 404, body: googleError(404, "NOT_FOUND", "No route for \(request.method) \(request.path)."))
            }
        }
        router.add(.post, "/v1/projects/{project}/messages:send") { [unowned(unsafe) self] request, match, responder in
            send(request, project: String(match["project"] ?? ""), responder: responder)
        }
        router.add(nil, "/v1/projects/{project}/messages:send", readsBody: false) { [unowned(unsafe) self] _, _, responder in
            respond(responder, status: 405, body: googleError(405, "METHOD_NOT_ALLOWED", "Use POST for messages:send."))
        }
    }

    /// 401 unless the request carries the bearer secret, an access token or a sender's secret; who it is from is
    /// then the route's ``caller``.
    private func authorization(_ request: HTTPRequest) -> HTTPResponse? {
        guard let caller = receiver.caller(request.headers.value(of: "authorization")) else {
            let body = googleError(401, "UNAUTHENTICATED", "Request is missing or has an invalid bearer secret.")
            return .json(401, body, headers: [("WWW-Authenticate", "Bearer")])
        }
        self.caller = caller
        return nil
    }

    /// The refusal of the request being routed when its ``caller`` lacks a scope of `scopes` (403
    /// `PERMISSION_DENIED`, naming it) or is over its rate limit (429 `RESOURCE_EXHAUSTED`, FCM's `QUOTA_EXCEEDED`,
    /// with `Retry-After`); `nil`: go on (the request is counted against the limit).
    func refusal(needing scopes: SenderScopes) -> HTTPResponse? {
        let missing = scopes.subtracting(caller.scopes)
        guard missing.isEmpty else {
            let who = caller.sender.map { "The sender \($0.credential.name)" } ?? "This credential"
            let message = "\(who) lacks the scope \(missing) (it has: \(caller.scopes.names.joined(separator: ", ")))."
            return .json(403, googleError(403, "PERMISSION_DENIED", message))
        }
        guard case .some(.some(let wait)) = caller.sender?.bucket?.take(now: .now), let sender = caller.sender else { return nil }
        let message =
            "The sender \(sender.credential.name) is over its rate limit (\(sender.bucket?.rate ?? 0) requests/s, bursts of \(Int(sender.bucket?.burst ?? 0))). Retry after \(wait) s."
        let body: JSONValue = [
            "error": [
                "code": 429, "message": .string(message), "status": "RESOURCE_EXHAUSTED",
                "details": [["@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": "QUOTA_EXCEEDED"]],
            ]
        ]
        return .json(429, body, headers: [("Retry-After", String(wait))])
    }

    /// The scope a send needs: ``SenderScopes/sendTopics`` for a topic or a condition, else ``SenderScopes/send``
    /// (a body that is not JSON needs `send`, and the bus refuses it).
    private static func scope(ofSend body: [UInt8]) -> SenderScopes {
        guard let message = (try? JSONParser.parse(body))?["message"] else { return .send }
        return message["topic"] != nil || message["condition"] != nil ? .sendTopics : .send
    }

    /// Answers with `body` as JSON (`nil`: no body, no `Content-Type`).
    func respond(_ responder: HTTPResponder, status: Int, body: JSONValue?, extraHeaders: [(name: String, value: String)] = []) {
        guard let body else { return responder.respond(HTTPResponse(status: status, headers: extraHeaders)) }
        responder.respond(.json(status, body, headers: extraHeaders))
    }

    /// Google's error shape without FCM's details: `{"error": {"code": ..., "message": ..., "status": ...}}`.
    func googleError(_ code: Int, _ status: String, _ message: String) -> JSONValue {
        ["error": ["code": .int(Int64(code)), "message": .string(message), "status": .string(status)]]
    }

    /// A limit's answer (413, 431): `INVALID_ARGUMENT` as FCM says it, with the HTTP status as the code.
    private func limitError(_ code: Int, _ message: String) -> JSONValue {
        [
            "error": [
                "code": .int(Int64(code)), "message": .string(message), "status": "INVALID_ARGUMENT",
                "details": [["@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": "INVALID_ARGUMENT"]],
            ]
        ]
    }

    /// `POST /v1/projects/{project}/messages:send`: submitted to the bus (forwarded, as a gateway) and answered.
    private func send(_ request: HTTPRequest, project: String, responder: HTTPResponder) {
        // Only a caller without both send scopes makes the body be read for its target.
        let needed: SenderScopes = caller.scopes.isSuperset(of: [.send, .sendTopics]) ? [] : Self.scope(ofSend: request.body)
        if let refusal = refusal(needing: needed) { return responder.respond(refusal) }
        guard project == context.projectID else {
            let error = MessageError(.senderMismatch(expected: context.projectID, got: project))
            respond(responder, status: error.status.httpStatus, body: error.fcmErrorBody)
            return
        }
        // The API is captured strongly: it outlives the bus's answer anyway, and a weak reference would cost a
        // side-table lookup on every request.
        let sendAnswers = self.sendAnswers
        context.bus.submit(request.body, SendContext(forwarder: options.forwarder)) { outcome in
            switch outcome {
            case .accepted(let id):
                // The answer's bytes written straight from the project (it is this instance's) and the ID, no
                // JSONValue.
                responder.respond(
                    HTTPResponse(status: 200, contentType: HTTPResponse.jsonContentType, body: sendAnswers.answer(messageID: id)))
            case .invalid(let error), .refused(let error):
                self.respond(responder, status: error.status.httpStatus, body: error.fcmErrorBody)
            }
        }
    }

    /// `POST /token`: Google's OAuth 2.0 token endpoint for service accounts (the JWT-bearer grant). An assertion
    /// naming a key not yet known reads the keys first (a key issued since the last read).
    private func routeToken(_ request: HTTPRequest, tokens: ServiceAccountTokens, responder: HTTPResponder) {
        // queryItems reads what follows the first "?": the form is a query string.
        let form = HTTPAPI.queryItems("/token?" + String(decoding: request.body, as: UTF8.self))
        let answer: @Sendable () -> Void = { [unowned(unsafe) self] in
            do {
                let issued = try tokens.exchange(form, now: Int64(time(nil)))
                respond(
                    responder, status: 200,
                    body: ["access_token": .string(issued.token), "expires_in": .int(issued.expiresIn), "token_type": "Bearer"],
                    extraHeaders: [("Cache-Control", "no-store")])
            } catch let error as OAuthError {
                respond(responder, status: error.error == "invalid_client" ? 401 : 400, body: error.body)
            } catch {
                respond(responder, status: 500, body: googleError(500, "INTERNAL", "\(error)"))
            }
        }
        guard let keyID = ServiceAccountTokens.keyID(ofAssertionIn: form), !tokens.knows(keyID), !tokens.loadedRecently else {
            return answer()
        }
        tokens.readKeys(on: context.loop, logger: context.logger, then: answer)
    }

    /// APNs provider style: `POST /3/device/{token}`, the payload as body, `apns-*` headers; 200 with `apns-id` (the
    /// sender's, or a new UUID) and `apns-unique-id`, or APNs' status and `{"reason": ...}` with `apns-id`.
    ///
    /// On a connection whose client sent a provider certificate, the certificate authorizes the push, as on APNs:
    /// `authorization` is ignored, and `apns-topic` must be one of its topics (400 `TopicDisallowed`), or missing
    /// for a certificate of one topic, which is then the push's (400 `MissingTopic` for several). Otherwise, with
    /// provider keys configured or client certificates required, the request needs a provider token (or the bearer
    /// secret, when one is set): 403 otherwise.
    private func routeAPNs(_ request: HTTPRequest, deviceToken: String, responder: HTTPResponder) {
        let given = request.headers.value(of: "apns-id")
        let apnsID = given.flatMap { try? APNsHeaders.parse(["apns-id": $0]).id } ?? Self.randomUUID()
        func refuse(_ status: Int, _ reason: String, headers: [(name: String, value: String)] = []) {
            respond(responder, status: status, body: ["reason": .string(reason)], extraHeaders: [("apns-id", apnsID)] + headers)
        }
        guard request.method == .post else { return refuse(405, "MethodNotAllowed") }
        var headers = request.headers.dictionary()
        if let certificate = providerCertificate {
            do {
                headers["apns-topic"] = try certificate.topic(for: headers["apns-topic"])
            } catch {
                return refuse(400, error.rawValue)
            }
            caller = .everything
        } else if apnsAuthentication {
            // The route is open to the router: who the request is from is found here.
            let authorization = request.headers.value(of: "authorization")
            if options.secret != nil, let caller = receiver.caller(authorization) {
                self.caller = caller
            } else {
                do throws(APNsTokenRefusal) {
                    guard let tokens = receiver.apnsTokens else {
                        // Client certificates without provider keys: no token can be valid.
                        throw authorization == nil ? .missing : .invalid
                    }
                    try tokens.verify(authorization: authorization, now: Int64(time(nil)))
                } catch {
                    return refuse(403, error.rawValue)
                }
                caller = .everything
            }
        }
        if let refusal = refusal(needing: .send) {
            let tooMany = refusal.status == 429
            return refuse(refusal.status, tooMany ? "TooManyRequests" : "Forbidden", headers: tooMany ? refusal.headers : [])
        }
        let format = SendContext.Format.apns(headers: headers, deviceToken: deviceToken)
        context.bus.submit(request.body, SendContext(format: format, messageID: given == nil ? apnsID : nil)) { [weak self] outcome in
            guard let self else { return }
            switch outcome {
            case .accepted(let id):
                self.respond(responder, status: 200, body: nil, extraHeaders: [("apns-id", id), ("apns-unique-id", Self.randomUUID())])
            case .invalid(let error), .refused(let error):
                var body: JSONValue = ["reason": .string(error.apnsReason)]
                if case .tokenRetired(_, let milliseconds) = error.reason {
                    // APNs' 410: when the token stopped being valid, in milliseconds since 1970.
                    body = ["reason": .string(error.apnsReason), "timestamp": .int(milliseconds)]
                }
                self.respond(responder, status: HTTPAPI.apnsStatus(error), body: body, extraHeaders: [("apns-id", apnsID)])
            }
        }
    }

    /// A random (version 4) UUID in its canonical lower-case form, as APNs writes `apns-id`.
    static func randomUUID() -> String {
        var bytes = (0..<16).map { _ in UInt8.random(in: 0...255) }
        bytes[6] = bytes[6] & 0x0F | 0x40
        bytes[8] = bytes[8] & 0x3F | 0x80
        let hex = Array("0123456789abcdef".utf8)
        var text: [UInt8] = []
        for (index, byte) in bytes.enumerated() {
            if [4, 6, 8, 10].contains(index) { text.append(UInt8(ascii: "-")) }
            text += [hex[Int(byte >> 4)], hex[Int(byte & 0x0F)]]
        }
        return String(decoding: text, as: UTF8.self)
    }

    /// The HTTP status APNs answers a reason with.
    static func apnsStatus(_ error: MessageError) -> Int {
        switch error.reason {
        case .payloadTooLarge: 413
        case .tokenRetired: 410
        case .busy: 429
        case .shuttingDown, .storeUnavailable: 503
        case .handlerFailed: 500
        default: 400
        }
    }
}
