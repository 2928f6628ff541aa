import FuzzSupport
import Herald

/// The APNs provider request decoder (the `apns-*` headers and the payload) on arbitrary bytes. The input is
/// header lines (`name: value`), an empty line, then the payload; without an empty line it is all payload.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafePointer<UInt8>, _ count: Int) -> CInt {
    let bytes = FuzzInput.bytes(start, count)
    var headers: [String: String] = [:]
    var payload = bytes[...]
    let newline = UInt8(ascii: "\n")
    if let split = bytes.indices.first(where: { $0 + 1 < bytes.count && bytes[$0] == newline && bytes[$0 + 1] == newline }) {
        payload = bytes[(split + 2)...]
        for line in bytes[..<split].split(separator: newline) {
            let text = String(decoding: line, as: UTF8.self)
            guard let colon = text.firstIndex(of: ":") else { continue }
            let value = text[text.index(after: colon)...].drop { $0 == " " }
            headers[String(text[..<colon])] = String(value)
        }
    }
    _ = try? APNsHeaders.parse(headers)
    _ = try? APNsRequest.decode(payload: Array(payload), headers: headers, deviceToken: "fuzz-device-token", context: FuzzInput.decoding)
    return 0
}

@_cdecl("FuzzAPNs_main")
public func fuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> CInt {
    fuzzerMain(argc, argv, fuzz)
}
