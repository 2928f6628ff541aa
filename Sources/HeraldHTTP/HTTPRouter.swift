import Glibc

/// A route table: method and path pattern to a handler, tried in the order they were added.
///
/// A pattern is a path of segments: a literal (`messages:send`), `{name}` for any one segment, and a last `**`
/// for any number of further segments (none included). Paths are split on `/`, empty segments dropped, the query
/// set aside. A pattern without parameters matches the path exactly instead, compared with the target's bytes (whole,
/// or up to its `?`): the route most requests take costs no splitting and no `String`.
///
/// A request that no route takes goes to ``notFound``. Before a route runs, ``authorize`` is asked unless the
/// route is `open`; a request no route takes is asked too, so that an unauthorized client cannot map the routes.
/// Loop thread only, like the sessions that call it; routes are added before the first request.
public final class HTTPRouter: HTTPRequestHandler {
    /// A route's handler: the request, what its pattern matched, and the answer slot.
    public typealias Handler = (HTTPRequest, HTTPRouteMatch, HTTPResponder) -> Void

    /// A class, so that trying a route costs one retain, not one per field.
    private final class Route {
        let method: HTTPMethod?
        let segments: [Segment]
        /// The pattern's bytes when it has no parameters.
        let literal: [UInt8]?
        let open: Bool
        let readsBody: Bool
        let handler: Handler

        init(method: HTTPMethod?, segments: [Segment], literal: [UInt8]?, open: Bool, readsBody: Bool, handler: @escaping Handler) {
            self.method = method
            self.segments = segments
            self.literal = literal
            self.open = open
            self.readsBody = readsBody
            self.handler = handler
        }
    }

    private enum Segment {
        case literal(String)
        case parameter(String)
        case rest
    }

    private var routes: [Route] = []

    /// Asked before every route that is not `open`, and before ``notFound``: an answer refuses the request
    /// (401 without the right credentials, say), `nil` lets it through. By default, every request goes through.
    public var authorize: (HTTPRequest) -> HTTPResponse? = { _ in nil }

    /// Answers a request no route takes. By default, 404 as plain text.
    public var notFound: (HTTPRequest, HTTPResponder) -> Void = { request, responder in
        responder.respond(.text(404, "No route for \(request.method) \(request.path).\n"))
    }

    /// The answer to a request a session refuses itself. By default, the error's message as plain text.
    public var errorResponse: (HTTPRequestError) -> HTTPResponse = { error in .text(error.status, error.message + "\n") }

    public init() {}

    /// Adds a route for `method` (`nil`: any method) and `pattern`. An `open` route is not asked ``authorize``.
    /// A route that does not read the body (`readsBody: false`: a refusal, say) answers a request's head when its
    /// client waits for `100 Continue`, without the body being sent.
    public func add(
        _ method: HTTPMethod?, _ pattern: String, open: Bool = false, readsBody: Bool = true, _ handler: @escaping Handler
    ) {
        let segments: [Segment] = pattern.split(separator: "/").map { part in
            if part == "**" { return .rest }
            if part.hasPrefix("{"), part.hasSuffix("}") { return .parameter(String(part.dropFirst().dropLast())) }
            return .literal(String(part))
        }
        let isLiteral = segments.allSatisfy { if case .literal = $0 { true } else { false } }
        routes.append(
            Route(
                method: method, segments: segments, literal: isLiteral ? Array(pattern.utf8) : nil, open: open, readsBody: readsBody,
                handler: handler))
    }

    public func handle(_ request: HTTPRequest, responder: HTTPResponder) {
        guard let (route, match) = find(request) else {
            if let refusal = authorize(request) { return responder.respond(refusal) }
            return notFound(request, responder)
        }
        if !route.open, let refusal = authorize(request) { return responder.respond(refusal) }
        route.handler(request, match, responder)
    }

    public func handleHead(_ request: HTTPRequest, responder: HTTPResponder) -> Bool {
        guard let (route, match) = find(request) else {
            if let refusal = authorize(request) {
                responder.respond(refusal)
            } else {
                notFound(request, responder)
            }
            return true
        }
        if !route.open, let refusal = authorize(request) {
            responder.respond(refusal)
            return true
        }
        guard !route.readsBody else { return false }
        route.handler(request, match, responder)
        return true
    }

    public func response(to error: HTTPRequestError) -> HTTPResponse { errorResponse(error) }

    /// The first route that takes `request`, and what its pattern matched.
    private func find(_ request: HTTPRequest) -> (Route, HTTPRouteMatch)? {
        let target = request.targetBytes
        var split: (path: String, segments: [Substring])?
        for route in routes where route.method == nil || route.method == request.method {
            if let literal = route.literal {
                if Self.target(target, is: literal) { return (route, HTTPRouteMatch(segments: [], parameters: [:])) }
                continue
            }
            if split == nil {
                let path = request.path
                // Split on UTF-8 bytes, not Characters: grapheme breaking is slow.
                split = (path, path.utf8.split(separator: UInt8(ascii: "/")).map { Substring($0) })
            }
            if let parameters = Self.match(route.segments, split!.segments) {
                return (route, HTTPRouteMatch(segments: split!.segments, parameters: parameters))
            }
        }
        return nil
    }

    /// Whether the target is `literal`, whole or up to its `?`.
    private static func target(_ target: [UInt8], is literal: [UInt8]) -> Bool {
        guard target.count >= literal.count else { return false }
        guard target.count == literal.count || target[literal.count] == UInt8(ascii: "?") else { return false }
        guard !literal.isEmpty else { return true }
        return target.withUnsafeBytes { target in
            literal.withUnsafeBytes { literal in memcmp(target.baseAddress!, literal.baseAddress!, literal.count) == 0 }
        }
    }

    /// The parameters when `segments` match `pattern`.
    private static func match(_ pattern: [Segment], _ segments: [Substring]) -> [String: Substring]? {
        var parameters: [String: Substring] = [:]
        for (index, part) in pattern.enumerated() {
            switch part {
            case .rest: return parameters
            case .literal(let literal):
                guard index < segments.count, segments[index] == literal else { return nil }
            case .parameter(let name):
                guard index < segments.count else { return nil }
                parameters[name] = segments[index]
            }
        }
        return pattern.count == segments.count ? parameters : nil
    }
}

/// What a route's pattern matched.
public struct HTTPRouteMatch: Sendable {
    /// The path's segments (split on `/`, empty ones dropped, no query); empty for a pattern without parameters,
    /// which is matched whole.
    public let segments: [Substring]
    /// The `{name}` segments by name.
    public let parameters: [String: Substring]

    /// The segment the pattern's `{name}` matched.
    public subscript(name: String) -> Substring? { parameters[name] }
}
