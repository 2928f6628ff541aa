import Testing

@testable import Herald

@Suite("Minting installation IDs and tokens")
struct IdentityMintingTests {
    @Test("installation IDs are 22 base64url characters starting with c, d, e or f (never '-'), and tokens start with them")
    func installationIDShape() {
        let alphabet = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
        var firsts: Set<Character> = []
        for _ in 0..<2_000 {
            let fid = RegistrationIdentity.mintInstallationID()
            #expect(fid.count == 22)
            #expect(fid.allSatisfy(alphabet.contains))
            firsts.insert(fid.first!)
            let token = RegistrationIdentity.mintToken(for: fid)
            #expect(token.hasPrefix(fid + ":"))
            #expect(token.count == 22 + 1 + 43)
        }
        #expect(firsts == ["c", "d", "e", "f"])
    }
}
