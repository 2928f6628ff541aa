import Foundation
import HeraldTLS
import HeraldTesting
import Testing

/// ES256 signatures and P-256 keys through OpenSSL, checked against the `openssl` command: what it signs verifies
/// here, what is signed here verifies there, and every malformed key or signature is refused.
@Suite("P-256 keys and ES256 signatures: interoperable with the openssl command, malformed ones refused")
struct P256KeyTests {
    static let openssl = URL(fileURLWithPath: "/usr/bin/openssl")

    /// Runs `openssl` with `arguments`; its standard output, or a failure with its error.
    private static func openssl(_ arguments: [String], input: String? = nil) async throws -> String {
        let result = try await runExecutable(openssl, arguments, input: input)
        try #require(result.status == 0, "openssl \(arguments.joined(separator: " ")): \(result.error)")
        return result.output
    }

    @Test("a signature made here verifies with openssl, one openssl makes verifies here; other data or keys do not")
    func interoperable() async throws {
        try await withTemporaryDirectory { directory in
            let key = try P256PrivateKey()
            let data = Array("eyJhbGciOiJFUzI1NiJ9.eyJpc3MiOiJURUFNIn0".utf8)
            // Here → openssl: the raw signature as the DER that `openssl dgst -verify` reads.
            let signature = try key.signES256(data)
            #expect(signature.count == 64)
            try Data(data).write(to: URL(fileURLWithPath: "\(directory)/data"))
            try Data(Self.der(signature)).write(to: URL(fileURLWithPath: "\(directory)/signature.der"))
            try key.publicKey.pemRepresentation.write(toFile: "\(directory)/public.pem", atomically: true, encoding: .utf8)
            let verified = try await Self.openssl([
                "dgst", "-sha256", "-verify", "\(directory)/public.pem", "-signature", "\(directory)/signature.der", "\(directory)/data",
            ])
            #expect(verified.contains("Verified OK"))
            #expect(key.publicKey.isValidES256Signature(signature, for: data))
            // openssl → here: its key (SEC1 PEM, as `openssl ecparam -genkey` writes) and its DER signature.
            let theirs = try await Self.openssl(["ecparam", "-name", "prime256v1", "-genkey", "-noout"])
            #expect(theirs.contains("BEGIN EC PRIVATE KEY"))
            try theirs.write(toFile: "\(directory)/theirs.pem", atomically: true, encoding: .utf8)
            _ = try await Self.openssl([
                "dgst", "-sha256", "-sign", "\(directory)/theirs.pem", "-out", "\(directory)/theirs.der", "\(directory)/data",
            ])
            let theirSignature = try Self.raw(fromDER: Array(Data(contentsOf: URL(fileURLWithPath: "\(directory)/theirs.der"))))
            let theirKey = try P256PrivateKey(pem: theirs)
            let theirPublic = try P256PublicKey(pem: try await Self.openssl(["ec", "-pubout"], input: theirs))
            #expect(theirPublic.x963Representation == theirKey.publicKey.x963Representation)
            #expect(theirPublic.isValidES256Signature(theirSignature, for: data))
            // Not for other data, another key, or a changed signature.
            #expect(!theirPublic.isValidES256Signature(theirSignature, for: data + [0]))
            #expect(!key.publicKey.isValidES256Signature(theirSignature, for: data))
            var changed = theirSignature
            changed[40] ^= 1
            #expect(!theirPublic.isValidES256Signature(changed, for: data))
        }
    }

    @Test("the key round-trips through its PEM forms and its X9.63 point")
    func representations() throws {
        let key = try P256PrivateKey()
        #expect(key.pemRepresentation.hasPrefix("-----BEGIN PRIVATE KEY-----"))
        #expect(try P256PrivateKey(pem: key.pemRepresentation).publicKey.x963Representation == key.publicKey.x963Representation)
        let point = key.publicKey.x963Representation
        #expect(point.count == 65 && point[0] == 4)
        let fromPoint = try P256PublicKey(x963Representation: point)
        #expect(fromPoint.pemRepresentation == key.publicKey.pemRepresentation)
        #expect(try P256PublicKey(pem: fromPoint.pemRepresentation).x963Representation == point)
    }

    @Test("malformed keys and signatures are refused: wrong length or form, a point off the curve, other curves, RSA")
    func malformed() async throws {
        let key = try P256PrivateKey()
        let point = key.publicKey.x963Representation
        var offCurve = point
        offCurve[64] ^= 1
        var compressedForm = point
        compressedForm[0] = 2
        for bytes in [[], Array(point.dropFirst()), point + [0], offCurve, compressedForm, [UInt8](repeating: 0, count: 65)] {
            #expect(throws: KeyError.self, "\(bytes.count) bytes") { try P256PublicKey(x963Representation: bytes) }
        }
        let p384 = try await Self.openssl(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-384"])
        #expect(throws: KeyError.self) { try P256PrivateKey(pem: p384) }
        let p384Public = try await Self.openssl(["pkey", "-pubout"], input: p384)
        #expect(throws: KeyError.self) { try P256PublicKey(pem: p384Public) }
        let rsa = try RSAKeyPair.generate(bits: 1024)  // small: only refused here, and quick under a sanitizer
        #expect(throws: KeyError.self) { try P256PrivateKey(pem: rsa.privateKeyPEM) }
        #expect(throws: KeyError.self) { try P256PublicKey(pem: rsa.publicKeyPEM) }
        #expect(throws: KeyError.self) { try RS256PublicKey(pem: key.publicKey.pemRepresentation) }
        #expect(throws: KeyError.self) { try P256PublicKey(pem: "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n") }
        #expect(throws: KeyError.self) { try P256PrivateKey(pem: "not a key") }
        let data = Array("data".utf8)
        let signature = try key.signES256(data)
        for bad in [
            [], Array(signature.dropLast()), signature + [0], [UInt8](repeating: 0, count: 64), [UInt8](repeating: 0xFF, count: 64),
        ] {
            #expect(!key.publicKey.isValidES256Signature(bad, for: data), "\(bad.count) bytes")
        }
        // Each signature has a nonce of its own, and both verify.
        let again = try key.signES256(data)
        #expect(again != signature && key.publicKey.isValidES256Signature(again, for: data))
    }

    @Test("SHA-256 of the FIPS 180-2 examples")
    func digest() {
        func hex(_ bytes: [UInt8]) -> String { bytes.map { String(format: "%02x", $0) }.joined() }
        #expect(hex(sha256("abc".utf8)) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        #expect(hex(sha256([UInt8]())) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        #expect(
            hex(sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq".utf8))
                == "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1")
    }

    /// A raw signature (r, s) as DER: SEQUENCE { INTEGER r, INTEGER s }.
    private static func der(_ raw: [UInt8]) -> [UInt8] {
        func integer(_ bytes: ArraySlice<UInt8>) -> [UInt8] {
            var value = Array(bytes.drop { $0 == 0 })
            if value.isEmpty || value[0] & 0x80 != 0 { value.insert(0, at: 0) }
            return [0x02, UInt8(value.count)] + value
        }
        let body = integer(raw[0..<32]) + integer(raw[32..<64])
        return [0x30, UInt8(body.count)] + body
    }

    /// The raw signature (r and s, 32 bytes each) of a DER one.
    private static func raw(fromDER der: [UInt8]) throws -> [UInt8] {
        try #require(der.count > 2 && der[0] == 0x30 && Int(der[1]) == der.count - 2, "not a DER sequence")
        var at = 2
        var raw: [UInt8] = []
        for _ in 0..<2 {
            try #require(der[at] == 0x02)
            let length = Int(der[at + 1])
            let value = der[(at + 2)..<(at + 2 + length)].drop { $0 == 0 }
            try #require(value.count <= 32)
            raw += [UInt8](repeating: 0, count: 32 - value.count) + value
            at += 2 + length
        }
        return raw
    }
}
