import Glibc
import Herald

// The API routes of an HTTP connection: the route table, `/healthz`, authorization, FCM v1 sends and APNs
// provider pushes. Topic management (FCM v1 and Instance ID) is in HTTPTopicRoutes.swift; the HTTP framing
// (parsing, limits, keep-alive, writing answers) in HTTPSession.swift.

extension HTTPSession {
    /// `POST` to this instance's `sendPath` exactly (no query).
    func routeSend(sequence: Int, keepAlive: Bool) {
        guard authorize(sequence: sequence, keepAlive: keepAlive) else { return }
        send(project: context.projectID, sequence: sequence, keepAlive: keepAlive)
    }

    /// Whether the request carries the bearer secret; when not, answers 401.
    func authorize(sequence: Int, keepAlive: Bool) -> Bool {
        guard receiver.authorized(headers.value(of: "authorization")) else {
            let body = googleError(401, "UNAUTHENTICATED", "Request is missing or has an invalid bearer secret.")
            respond(sequence: sequence, status: 401, body: body, extraHeaders: ["WWW-Authenticate: Bearer"], close: !keepAlive)
            return false
        }
        return true
    }

    /// Answers the request. With `headOnly`, answers only if the answer needs no body (a refusal), and returns
    /// whether it answered.
    @discardableResult
    func route(method: String, path: String, sequence: Int, keepAlive: Bool, headOnly: Bool = false) -> Bool {
        // Split on UTF-8 bytes, not Characters: grapheme breaking made path splitting a fifth of a request's work.
        let pathOnly: Substring = path.utf8.firstIndex(of: UInt8(ascii: "?")).map { path[..<$0] } ?? path[...]
        if pathOnly == "/healthz", method == "GET" {
            guard !headOnly else { return false }
            let ready = !context.bus.isDraining
            respond(
                sequence: sequence, status: ready ? 200 : 503, body: ["status": .string(ready ? "ready" : "draining")], close: !keepAlive)
            return true
        }
        // With APNs provider keys, the APNs route checks its own authorization (a provider token, or the secret).
        let apnsAuthorizes = receiver.apnsTokens != nil && pathOnly.hasPrefix("/3/device/")
        guard apnsAuthorizes || authorize(sequence: sequence, keepAlive: keepAlive) else { return true }
        if method == "POST", pathOnly == sendPath {
            // The request nearly every request is: no splitting of the path.
            guard !headOnly else { return false }
            send(project: context.projectID, sequence: sequence, keepAlive: keepAlive)
            return true
        }
        let parts = pathOnly.utf8.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: true).map { Substring($0) }
        let isSend = parts.count == 4 && parts[0] == "v1" && parts[1] == "projects" && parts[3] == "messages:send"
        if options.forwarder != nil, !isSend {
            // A gateway passes sends on; what would act on this instance (topic management, APNs pushes to its
            // token) has no meaning there.
            let message =
                "This Herald is a gateway: it forwards POST /v1/projects/{project}/messages:send only. Manage topics on the instances themselves (herald topics, or their own HTTP endpoint)."
            respond(sequence: sequence, status: 501, body: googleError(501, "UNIMPLEMENTED", message), close: !keepAlive)
            return true
        }
        if parts.count == 3, parts[0] == "3", parts[1] == "device" {
            guard !headOnly else { return false }
            routeAPNs(method: method, deviceToken: String(parts[2]), sequence: sequence, keepAlive: keepAlive)
            return true
        }
        if parts.count == 2, parts[0] == "iid", parts[1] == "v1:batchAdd" || parts[1] == "v1:batchRemove" {
            guard !headOnly else { return false }
            routeInstanceID(method: method, add: parts[1] == "v1:batchAdd", sequence: sequence, keepAlive: keepAlive)
            return true
        }
        if parts.count >= 6, parts[0] == "v1", parts[1] == "projects", parts[3] == "registrations", parts[5] == "topicSubscriptions" {
            guard !headOnly else { return false }
            routeTopics(method: method, path: path, parts: parts.map(String.init), sequence: sequence, keepAlive: keepAlive)
            return true
        }
        guard parts.count == 4, parts[0] == "v1", parts[1] == "projects", parts[3] == "messages:send" else {
            respond(
                sequence: sequence, status: 404, body: googleError(404, "NOT_FOUND", "No route for \(method) \(pathOnly)."),
                close: !keepAlive)
            return true
        }
        guard method == "POST" else {
            respond(
                sequence: sequence, status: 405, body: googleError(405, "METHOD_NOT_ALLOWED", "Use POST for messages:send."),
                close: !keepAlive)
            return true
        }
        guard !headOnly else { return false }
        send(project: String(parts[2]), sequence: sequence, keepAlive: keepAlive)
        return true
    }

    /// `POST /v1/projects/{project}/messages:send`: submitted to the bus (forwarded, as a gateway) and answered.
    private func send(project: String, sequence: Int, keepAlive: Bool) {
        guard project == context.projectID else {
            let error = MessageError(.senderMismatch(expected: context.projectID, got: project))
            respond(sequence: sequence, status: error.status.httpStatus, body: error.fcmErrorBody, close: !keepAlive)
            return
        }
        context.bus.submit(body, SendContext(forwarder: options.forwarder)) { [weak self] outcome in
            guard let self else { return }
            switch outcome {
            case .accepted(let id):
                self.respondSent(sequence: sequence, project: project, messageID: id, close: !keepAlive)
            case .invalid(let error), .refused(let error):
                self.respond(sequence: sequence, status: error.status.httpStatus, body: error.fcmErrorBody, close: !keepAlive)
            }
        }
    }

    /// APNs provider style: `POST /3/device/{token}`, the payload as body, `apns-*` headers; 200 with `apns-id` (the
    /// sender's, or a new UUID) and `apns-unique-id`, or APNs' status and `{"reason": ...}` with `apns-id`. With provider
    /// keys configured, the request needs a provider token (or the bearer secret, when one is set): 403 otherwise.
    private func routeAPNs(method: String, deviceToken: String, sequence: Int, keepAlive: Bool) {
        let given = headers.value(of: "apns-id")
        let apnsID = given.flatMap { try? APNsHeaders.parse(["apns-id": $0]).id } ?? Self.randomUUID()
        func refuse(_ status: Int, _ reason: String) {
            respond(
                sequence: sequence, status: status, body: ["reason": .string(reason)], extraHeaders: ["apns-id: \(apnsID)"],
                close: !keepAlive)
        }
        guard method == "POST" else { return refuse(405, "MethodNotAllowed") }
        if let tokens = receiver.apnsTokens {
            let authorization = headers.value(of: "authorization")
            if receiver.options.secret == nil || !receiver.authorized(authorization) {
                do {
                    try tokens.verify(authorization: authorization, now: Int64(time(nil)))
                } catch {
                    return refuse(403, error.rawValue)
                }
            }
        }
        let format = SendContext.Format.apns(headers: headers.dictionary(), deviceToken: deviceToken)
        context.bus.submit(body, SendContext(format: format, messageID: given == nil ? apnsID : nil)) { [weak self] outcome in
            guard let self else { return }
            switch outcome {
            case .accepted(let id):
                self.respond(
                    sequence: sequence, status: 200, body: nil, extraHeaders: ["apns-id: \(id)", "apns-unique-id: \(Self.randomUUID())"],
                    close: !keepAlive)
            case .invalid(let error), .refused(let error):
                self.respond(
                    sequence: sequence, status: HTTPSession.apnsStatus(error), body: ["reason": .string(error.apnsReason)],
                    extraHeaders: ["apns-id: \(apnsID)"], close: !keepAlive)
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
        case .busy: 429
        case .shuttingDown, .storeUnavailable: 503
        case .handlerFailed: 500
        default: 400
        }
    }
}
