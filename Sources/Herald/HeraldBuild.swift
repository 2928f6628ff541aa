/// Facts about this build of Herald.
public enum HeraldBuild {
    /// The version of the Herald package: the last release's at its tag, else the next release's, the one being
    /// worked towards (`herald --version` adds the commit then).
    public static let version = "0.2.0"
}
