# syntax=docker/dockerfile:1
# The local-ccm image: both programs, each bundled by esbuild into one file, the native addons they load
# (sockets; memory with its preload library), and Node.js — no npm, no shell, no dev dependencies. The chart runs
# `node --optimize-for-size --jitless /app/dist/local-ccm.cjs` (DaemonSet) and the same for
# /app/dist/node-lifecycle-controller.cjs (Deployment).
# test/deploy/image.test.ts runs the bundles from exactly the files the runtime stage copies.
# `npm run image` (localcluster/image.ts) writes the same layout without Docker: its APP_FILES are these
# COPY lines, and node sits in /nodejs/bin as in the base; the test checks that both agree.

FROM node:24-bookworm AS build
WORKDIR /app
# node-gyp (npm ci builds native/sockets and native/memory; python3, make and g++ come with this image) uses the image's
# own Node headers instead of downloading them.
ENV npm_config_nodedir=/usr/local
COPY package.json package-lock.json ./
COPY native/sockets/ native/sockets/
COPY native/memory/ native/memory/
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
# LD_PRELOAD: native/memory's library turns readahead off for node's own mapped pages (see docs/performance.md).
ENV NODE_ENV=production \
    PATH=/nodejs/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LD_PRELOAD=/app/node_modules/local-ccm-memory/build/Release/random_readahead.so
COPY --from=build /app/dist/ /app/dist/
# The sockets addon (netlink, ICMP), built above by node-gyp, as the package the bundle requires.
COPY --from=build /app/native/sockets/package.json /app/node_modules/local-ccm-sockets/package.json
COPY --from=build /app/native/sockets/build/Release/sockets.node /app/node_modules/local-ccm-sockets/build/Release/sockets.node
# The memory addon (releases start-up's pages) and the preload library LD_PRELOAD names.
COPY --from=build /app/native/memory/package.json /app/node_modules/local-ccm-memory/package.json
COPY --from=build /app/native/memory/build/Release/memory.node /app/node_modules/local-ccm-memory/build/Release/memory.node
COPY --from=build /app/native/memory/build/Release/random_readahead.so /app/node_modules/local-ccm-memory/build/Release/random_readahead.so
USER 65532:65532
ENTRYPOINT ["node"]
CMD ["/app/dist/local-ccm.cjs", "--help"]
