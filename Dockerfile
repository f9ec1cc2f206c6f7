# syntax=docker/dockerfile:1
# The local-ccm image: both programs, each bundled by esbuild into one file, the native sockets addon
# they load, and Node.js — no npm, no shell, no dev dependencies. The chart runs
# `node --optimize-for-size --jitless /app/dist/local-ccm.cjs` (DaemonSet) and the same for
# /app/dist/node-lifecycle-controller.cjs (Deployment).
# test/deploy/image.test.ts runs the bundles from exactly the files the runtime stage copies.
# `npm run image` (localcluster/image.ts) writes the same layout without Docker: its APP_FILES are these
# COPY lines, and node sits in /nodejs/bin as in the base; the test checks that both agree.

FROM node:24-bookworm AS build
WORKDIR /app
# node-gyp (npm ci builds native/sockets; python3, make and g++ come with this image) uses the image's
# own Node headers instead of downloading them.
ENV npm_config_nodedir=/usr/local
COPY package.json package-lock.json ./
COPY native/sockets/ native/sockets/
RUN npm ci
COPY scripts/ scripts/
# The bundler, which `npm run build` shares with the local cluster's image builder.
COPY localcluster/bundle.ts localcluster/bundle.ts
COPY src/ src/
# The commit --version and the build_info metric name (no .git in the context): docker build --build-arg.
ARG LOCAL_CCM_REVISION=unknown
RUN npm run build

FROM gcr.io/distroless/nodejs24-debian12:nonroot
WORKDIR /app
# The base image keeps node in /nodejs/bin without putting it on PATH; the chart's command says `node`.
ENV NODE_ENV=production \
    PATH=/nodejs/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
COPY --from=build /app/dist/ /app/dist/
# The sockets addon (netlink, ICMP), built above by node-gyp, as the package the bundle requires.
COPY --from=build /app/native/sockets/package.json /app/node_modules/local-ccm-sockets/package.json
COPY --from=build /app/native/sockets/build/Release/sockets.node /app/node_modules/local-ccm-sockets/build/Release/sockets.node
USER 65532:65532
ENTRYPOINT ["node"]
CMD ["/app/dist/local-ccm.cjs", "--help"]
