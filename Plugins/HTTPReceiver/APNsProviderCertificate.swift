import HeraldHTTP
import HeraldTLS

/// What an APNs provider certificate authorizes, as APNs reads it from the TLS client certificate: the topics it
/// names. The subject's `UID` is the app's bundle ID; Apple's certificates for several topics (the app, its VoIP
/// pushes, its complication) list them all in the extension 1.2.840.113635.100.6.3.6, a sequence of strings each
/// followed by a sequence naming its kind.
struct APNsProviderCertificate: Sendable, Equatable {
    /// Apple's extension listing a certificate's topics.
    static let topicsExtension = "1.2.840.113635.100.6.3.6"

    /// Every topic the certificate names, the subject's first, without repeats.
    let topics: [String]

    /// The certificate's topics; `nil` when it names none (no `UID`, no topics extension): then it is not a provider
    /// certificate, and requests on its connection are authorized as on one without a certificate.
    init?(_ certificate: PeerCertificate) {
        var topics: [String] = []
        for topic in certificate.subjectUserIDs + (certificate.extensionStrings(oid: Self.topicsExtension) ?? [])
        where !topics.contains(topic) {
            topics.append(topic)
        }
        guard !topics.isEmpty else { return nil }
        self.topics = topics
    }

    /// Why a request's `apns-topic` is refused: APNs' reason, answered with 400.
    enum TopicRefusal: String, Error {
        /// No `apns-topic`, and the certificate names several topics.
        case missing = "MissingTopic"
        /// An `apns-topic` the certificate does not name.
        case disallowed = "TopicDisallowed"
    }

    /// The topic of a request whose `apns-topic` is `requested`: that one when the certificate names it, the
    /// certificate's one topic when none is given (APNs' default, the subject's).
    func topic(for requested: String?) throws(TopicRefusal) -> String {
        guard let requested else {
            guard topics.count == 1 else { throw .missing }
            return topics[0]
        }
        guard topics.contains(requested) else { throw .disallowed }
        return requested
    }
}

/// The receiver's API for one connection whose client sent a provider certificate: it tells the API the
/// certificate before each request, on the loop thread, and the APNs route reads it there. Every other connection is
/// answered by the API itself.
final class ProviderCertificateConnection: HTTPRequestHandler {
    private let api: HTTPAPI
    private let certificate: APNsProviderCertificate

    init(api: HTTPAPI, certificate: APNsProviderCertificate) {
        self.api = api
        self.certificate = certificate
    }

    func handle(_ request: HTTPRequest, responder: HTTPResponder) {
        api.providerCertificate = certificate
        defer { api.providerCertificate = nil }
        api.handle(request, responder: responder)
    }

    func handleHead(_ request: HTTPRequest, responder: HTTPResponder) -> Bool {
        api.providerCertificate = certificate
        defer { api.providerCertificate = nil }
        return api.handleHead(request, responder: responder)
    }

    func response(to error: HTTPRequestError) -> HTTPResponse {
        api.response(to: error)
    }
}
