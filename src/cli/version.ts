// What is running: the package's version, the commit its bundle was built from (localcluster/bundle.ts defines
// LOCAL_CCM_REVISION; "source" when run from the .ts sources), and the runtime. --version prints it and each
// program's …_build_info metric carries it, so a bug report and a dashboard say which build they saw.
import packageJson from "../../package.json" with { type: "json" };

declare const LOCAL_CCM_REVISION: string | undefined;

export interface BuildInfo {
  version: string;
  revision: string;
  runtime: string;
}

export const BUILD: BuildInfo = {
  version: packageJson.version,
  revision: typeof LOCAL_CCM_REVISION === "string" ? LOCAL_CCM_REVISION : "source",
  runtime: `node ${process.versions.node}`,
};

/** What --version prints. */
export function versionText(program: string, build = BUILD): string {
  return `${program} ${build.version} (revision ${build.revision}, ${build.runtime})\n`;
}
