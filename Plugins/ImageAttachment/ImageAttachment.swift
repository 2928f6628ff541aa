import Glibc
public import Herald
import HeraldHTTPClient
import Logging

/// A `ContentModifier` that does what FCM's `populateNotificationContent` does in an Apple app's notification
/// service extension: downloads the notification's image — `fcm_options.image`, which FCM v1's
/// `notification.image` and `apns.fcm_options.image` both become — and attaches it, so that a presenter shows it
/// (the desktop presenter's `image-path`).
///
/// Only `mutable-content` notifications reach a content modifier (FCM sets `mutable-content` for an image).
/// The image is fetched over `https` only (verified against the system's CAs or ``Options/caFile``), bounded in
/// size (``Options/maximumBytes``, 10 MB as Apple's limit for an image attachment) and in time
/// (``Options/timeout``), and written to ``Options/directory`` as `<message ID>.<extension>`. A download that
/// fails, is too large or is not an image leaves the notification without it: a warning in the log and a
/// `diagnostic` analytics event `image_download_failed` with the `reason` say why. At the modifiers' deadline the
/// download is abandoned (`image_download_failed`, reason `deadline`). A local image (a `file://` URL or a path)
/// is left to the presenter.
public final class ImageAttachment: ContentModifier {
    /// What the modifier may fetch and where it keeps the files.
    public struct Options: Sendable, Equatable {
        /// Where downloaded images are written (created when missing); `herald serve` uses `DATA-DIR/attachments`.
        public var directory: String
        /// The largest image accepted, in bytes.
        public var maximumBytes: Int = 10 * 1024 * 1024
        /// The longest a download may take; the modifiers' deadline also bounds it.
        public var timeout: Duration = .seconds(20)
        /// A PEM file of CAs to trust instead of the system's.
        public var caFile: String?

        public init(directory: String, maximumBytes: Int = 10 * 1024 * 1024, timeout: Duration = .seconds(20), caFile: String? = nil) {
            self.directory = directory
            self.maximumBytes = maximumBytes
            self.timeout = timeout
            self.caFile = caFile
        }
    }

    public let options: Options
    private let state = Locked<(client: HTTPClient?, logger: Logger?)>((nil, nil))

    public init(options: Options) {
        self.options = options
    }

    public var descriptor: PluginDescriptor {
        PluginDescriptor(name: "image-attachment", summary: "downloads fcm_options.image and attaches it")
    }

    public func start(_ context: PluginContext) async throws {
        let client = HTTPClient(loop: context.loop, configuration: .init(caFile: options.caFile, userAgent: "Herald-ImageAttachment"))
        state.withLock { $0 = (client, context.logger) }
    }

    public func stop() async {
        state.withLock { $0 = (nil, nil) }
    }

    public func modify(_ request: ContentModificationRequest) async {
        guard let url = request.message.userInfo["fcm_options"]?["image"]?.stringValue, !url.isEmpty,
            !url.hasPrefix("/"), !url.hasPrefix("file://")
        else { return }
        let (client, logger) = state.withLock { $0 }
        guard let client else { return }
        do {
            let path = try await download(url, for: request.message, client: client)
            request.update { $0.attachments.append(NotificationAttachment(identifier: "image", path: path, type: nil)) }
        } catch is CancellationError {
            return  // the deadline: serviceExtensionTimeWillExpire says so
        } catch {
            logger?.warning(
                "notification image not attached; presenting the notification without it",
                metadata: ["message_id": "\(request.message.messageID ?? "")", "url": "\(url)", "reason": "\(error)"])
            request.recordDiagnostic("image_download_failed", parameters: ["url": url, "reason": "\(error)"])
        }
    }

    public func serviceExtensionTimeWillExpire(_ request: ContentModificationRequest) {
        guard let url = request.message.userInfo["fcm_options"]?["image"]?.stringValue else { return }
        state.withLock { $0.logger }?.warning(
            "notification image not downloaded before the deadline; presenting the notification without it",
            metadata: ["message_id": "\(request.message.messageID ?? "")", "url": "\(url)"])
        request.recordDiagnostic("image_download_failed", parameters: ["url": url, "reason": "deadline"])
    }

    /// Fetches `url` and writes it to the directory; returns the file's path.
    private func download(_ url: String, for message: RemoteMessage, client: HTTPClient) async throws -> String {
        guard url.hasPrefix("https://") else { throw ImageAttachmentError.notHTTPS(url) }
        let response = try await client.request("GET", url, timeout: options.timeout, maximumResponseBytes: options.maximumBytes)
        guard response.status == 200 else { throw ImageAttachmentError.status(url, response.status) }
        let type = response.value(of: "content-type")?.split(separator: ";").first.map { String($0).trimmed }
        if let type, !type.hasPrefix("image/"), type != "application/octet-stream" {
            throw ImageAttachmentError.notAnImage(url, type: type)
        }
        try Self.makeDirectory(options.directory)
        let name = Self.fileName(message.messageID ?? "image-\(UInt64.random(in: 0...UInt64.max))")
        let path = "\(options.directory)/\(name)\(Self.fileExtension(type: type, url: url))"
        try Self.write(response.body, to: path)
        return path
    }

    /// A message ID as a file name: anything but letters, digits, `-`, `_` and `.` becomes `_`, and no leading dot.
    static func fileName(_ id: String) -> String {
        let safe = String(id.map { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" || $0 == ".") ? $0 : "_" })
        return safe.hasPrefix(".") ? "_" + safe.dropFirst() : safe
    }

    /// `.png`, `.jpg`, ... from the media type, else from the URL's path, else none.
    static func fileExtension(type: String?, url: String) -> String {
        let byType = ["image/png": ".png", "image/jpeg": ".jpg", "image/gif": ".gif", "image/webp": ".webp", "image/svg+xml": ".svg"]
        if let type, let known = byType[type] { return known }
        let path = url.split(separator: "?").first.map(String.init) ?? url
        guard let dot = path.lastIndex(of: "."), !path[dot...].contains("/") else { return "" }
        let ext = path[dot...].lowercased()
        return [".png", ".jpg", ".jpeg", ".gif", ".webp", ".svg"].contains(ext) ? ext : ""
    }

    private static func makeDirectory(_ directory: String) throws {
        if mkdir(directory, 0o700) != 0, errno != EEXIST {
            throw ImageAttachmentError.file(directory, String(cString: strerror(errno)))
        }
    }

    private static func write(_ bytes: [UInt8], to path: String) throws {
        let temporary = path + ".partial"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw ImageAttachmentError.file(temporary, String(cString: strerror(errno))) }
        var written = 0
        while written < bytes.count {
            let result = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + written, $0.count - written) }
            if result < 0 {
                if errno == EINTR { continue }
                let reason = String(cString: strerror(errno))
                close(fd)
                unlink(temporary)
                throw ImageAttachmentError.file(temporary, reason)
            }
            written += result
        }
        close(fd)
        guard rename(temporary, path) == 0 else {
            let reason = String(cString: strerror(errno))
            unlink(temporary)
            throw ImageAttachmentError.file(path, reason)
        }
    }
}

/// Why an image was not attached (besides `HTTPClientError`, which says why a download failed).
public enum ImageAttachmentError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The URL is not `https://`.
    case notHTTPS(String)
    /// The server answered with a status other than 200.
    case status(String, Int)
    /// The server says the body is not an image.
    case notAnImage(String, type: String)
    /// The file could not be written.
    case file(String, String)

    public var description: String {
        switch self {
        case .notHTTPS(let url): "\(url) is not an https URL"
        case .status(let url, let status): "\(url) answered status \(status)"
        case .notAnImage(let url, let type): "\(url) is not an image (\(type))"
        case .file(let path, let reason): "cannot write \(path): \(reason)"
        }
    }
}

extension String {
    fileprivate var trimmed: String {
        String(drop { $0 == " " }.reversed().drop { $0 == " " }.reversed())
    }
}
