import Foundation

/// An answer as curl got it: the status, the headers (names lower-cased; the last of a repeated one) and the body.
public struct CurlAnswer: Sendable {
    public var status: Int
    public var headers: [String: String]
    public var body: String
}

/// Makes one HTTP/1.1 request with the real curl to `127.0.0.1:port`, with `Authorization: Bearer <bearer>` when
/// given and `body` as JSON; the answer as it came.
public func curlRequest(port: Int, _ method: String, _ path: String, body: String? = nil, bearer: String? = nil) throws -> CurlAnswer {
    var arguments = ["-sS", "-i", "--max-time", "30", "-X", method, "http://127.0.0.1:\(port)\(path)"]
    if let bearer { arguments += ["-H", "Authorization: Bearer \(bearer)"] }
    if let body { arguments += ["-H", "Content-Type: application/json", "--data-binary", body] }
    let result = try runExecutable(URL(fileURLWithPath: "/usr/bin/curl"), arguments)
    guard result.status == 0, let split = result.output.range(of: "\r\n\r\n") else {
        throw CurlError(message: "curl \(method) \(path) failed (exit \(result.status)): \(result.error)")
    }
    let lines = result.output[..<split.lowerBound].split(separator: "\r\n")
    let status = lines.first.flatMap { $0.split(separator: " ").dropFirst().first }.flatMap { Int($0) } ?? 0
    var headers: [String: String] = [:]
    for line in lines.dropFirst() {
        guard let colon = line.firstIndex(of: ":") else { continue }
        headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
    }
    return CurlAnswer(status: status, headers: headers, body: String(result.output[split.upperBound...]))
}

/// As the synchronous `curlRequest(port:_:_:body:bearer:)`, for an async test: curl is waited for on a thread of its
/// own (``onOwnThread(_:)``), not on one of the cooperative pool's few threads.
public func curlRequest(port: Int, _ method: String, _ path: String, body: String? = nil, bearer: String? = nil) async throws -> CurlAnswer
{
    try await onOwnThread { try curlRequest(port: port, method, path, body: body, bearer: bearer) }
}

/// curl could not make the request.
public struct CurlError: Error, CustomStringConvertible {
    public var message: String
    public var description: String { message }
}
